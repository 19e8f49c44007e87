package leasehold_test

import (
	"encoding/json"
	"net/http"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// serverDocument is the part of the served /openapi.json the parity test reads.
type serverDocument struct {
	Paths map[string]map[string]struct {
		OperationID string `json:"operationId"`
	} `json:"paths"`
	Components struct {
		Schemas struct {
			Problem struct {
				Properties struct {
					Code struct {
						Enum []string `json:"enum"`
					} `json:"code"`
				} `json:"properties"`
			} `json:"Problem"`
		} `json:"schemas"`
	} `json:"components"`
}

// The client against the server's own tables (clients/PROTOCOL.md): it knows every problem
// code the server can answer and no other, and covers each operation as clients/parity.json
// says, with calls that exist (or says why it does not offer it); every behaviour it lists is
// held by the Go test it names.
func TestParityWithServer(t *testing.T) {
	resp, err := http.Get(serverURL(t) + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc serverDocument
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	server := doc.Components.Schemas.Problem.Properties.Code.Enum
	if len(server) == 0 {
		t.Fatal("the server's document lists no problem codes")
	}
	if missing, unknown := diff(server, leasehold.ProblemCodes()); len(missing)+len(unknown) > 0 {
		t.Fatalf("problem codes: the client lacks %v and knows %v, which the server never answers", missing, unknown)
	}

	raw, err := os.ReadFile("../parity.json")
	if err != nil {
		t.Fatal(err)
	}
	var parity struct {
		Operations map[string]map[string]*string `json:"operations"`
		Behaviours map[string]map[string]string  `json:"behaviours"`
	}
	if err := json.Unmarshal(raw, &parity); err != nil {
		t.Fatal(err)
	}
	var served, listed []string
	for _, item := range doc.Paths {
		for _, op := range item {
			served = append(served, op.OperationID)
		}
	}
	for op := range parity.Operations {
		listed = append(listed, op)
	}
	if missing, unknown := diff(served, listed); len(missing)+len(unknown) > 0 {
		t.Fatalf("clients/parity.json lacks the operations %v and lists %v, which the server has not", missing, unknown)
	}
	if len(parity.Behaviours) == 0 {
		t.Error("clients/parity.json lists no behaviours")
	}
	for behaviour, by := range parity.Behaviours {
		file, test, _ := strings.Cut(by["go"], "::")
		source, err := os.ReadFile(file)
		if by["rule"] == "" || err != nil || !strings.Contains(string(source), "\nfunc "+test+"(t *testing.T) {") {
			t.Errorf("%s: no rule, or no Go test %q (%v)", behaviour, by["go"], err)
		}
	}
	types := map[string]reflect.Type{
		"Client": reflect.TypeOf(&leasehold.Client{}),
		"Lease":  reflect.TypeOf(&leasehold.Lease{}),
		"Term":   reflect.TypeOf(&leasehold.Term{}),
	}
	for op, by := range parity.Operations {
		call := by["go"]
		if call == nil {
			if why := by["why_not"]; why == nil || *why == "" {
				t.Errorf("%s: not offered by the Go client, and clients/parity.json says not why (why_not)", op)
			}
			continue
		}
		typ, method, _ := strings.Cut(*call, ".")
		rt, ok := types[typ]
		if !ok {
			t.Errorf("%s: no type %s", op, typ)
			continue
		}
		if _, ok := rt.MethodByName(method); method != "" && !ok {
			t.Errorf("%s: %s has no method %s", op, typ, method)
		}
	}
}

// diff says what of want got lacks, and what got has beyond want.
func diff(want, got []string) (missing, unknown []string) {
	in := func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	}
	for _, w := range want {
		if !in(got, w) {
			missing = append(missing, w)
		}
	}
	for _, g := range got {
		if !in(want, g) {
			unknown = append(unknown, g)
		}
	}
	sort.Strings(missing)
	sort.Strings(unknown)
	return missing, unknown
}
