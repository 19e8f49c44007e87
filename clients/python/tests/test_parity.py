"""The client against the server's own tables (clients/PROTOCOL.md): every problem code the
server can answer has its exception class and no other code is known; every operation of the
served OpenAPI document is covered as clients/parity.json says, by calls that exist (on both
halves: the blocking one is generated from the asyncio one), or not offered for a reason it
gives; every behaviour it lists is held by the Python test it names."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

import leasehold
from leasehold import _errors

PARITY = Path(__file__).resolve().parents[2] / "parity.json"


def test_parity_with_the_server(raw: httpx.Client) -> None:
    doc = raw.get("/openapi.json").json()
    served = doc["components"]["schemas"]["Problem"]["properties"]["code"]["enum"]
    assert served, "the server lists its problem codes"
    assert sorted(leasehold.PROBLEM_CODES) == sorted(served)
    for code in served:
        error = _errors.make_problem(409, {"code": code, "status": 409})
        assert type(error) is _errors.problem_class(409, code) and type(error) is not leasehold.ProblemError, code

    parity = json.loads(PARITY.read_text())["operations"]
    operations = sorted(op["operationId"] for item in doc["paths"].values() for op in item.values())
    assert sorted(parity) == operations, "clients/parity.json lists the server's operations"
    types = {
        "Client": (leasehold.Client, leasehold.AsyncClient),
        "Lease": (leasehold.Lease, leasehold.AsyncLease),
        "Term": (leasehold.Term, leasehold.AsyncTerm),
    }
    for operation, by in parity.items():
        call = by["python"]
        if call is None:
            assert by.get("why_not"), f"{operation}: not offered, and clients/parity.json says not why (why_not)"
            continue
        type_name, _, method = call.partition(".")
        assert type_name in types, f"{operation}: no type {type_name}"
        for cls in types[type_name]:
            assert not method or callable(getattr(cls, method, None)), f"{operation}: {cls.__name__}.{method}"


def test_every_behaviour_of_parity_json_has_its_python_test() -> None:
    behaviours = json.loads(PARITY.read_text())["behaviours"]
    assert behaviours, "clients/parity.json lists behaviours"
    for behaviour, by in behaviours.items():
        assert by.get("rule"), f"{behaviour}: says no rule"
        path, _, test = by["python"].partition("::")
        source = PARITY.parent / "python" / path
        assert source.is_file() and f"\ndef {test}(" in source.read_text(), f"{behaviour}: no test {by['python']}"
