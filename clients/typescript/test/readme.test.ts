// The README's examples, as written, against the package as it would be published: packed
// with `npm pack`, installed into a fresh project, compiled there with tsc, run with node.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import { URL_ } from "./support.js";

const packageDir = fileURLToPath(new URL("../../", import.meta.url));
const tsc = join(packageDir, "node_modules", ".bin", "tsc");

function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(command, args, { cwd, env, timeout: 60_000 }, (error, stdout, stderr) =>
      error ? reject(new Error(`${command} ${args.join(" ")}: ${error.message}\n${stdout}\n${stderr}`)) : resolve(stdout),
    );
  });
}

/** The ```ts blocks the README marks as tested, in order. */
async function examples(): Promise<string[]> {
  const readme = await readFile(join(packageDir, "README.md"), "utf8");
  return [...readme.matchAll(/<!-- The tests (?:run|compile)[^>]*-->\n```ts\n([\s\S]*?)```/g)].map((m) => m[1]!);
}

test("the package packs with what it publishes: code, declarations, README, license", async () => {
  const dir = await mkdtemp(join(tmpdir(), "leasehold-pack-"));
  try {
    const [packed] = JSON.parse(await run("npm", ["pack", "--ignore-scripts", "--json", "--pack-destination", dir], packageDir)) as [
      { name: string; version: string; files: { path: string }[] },
    ];
    const files = packed.files.map((f) => f.path);
    assert.equal(packed.name, "leasehold");
    assert.equal(packed.version, "0.1.0");
    for (const file of ["package.json", "README.md", "LICENSE", "dist/index.js", "dist/index.d.ts", "dist/polyfill.js"]) {
      assert.ok(files.includes(file), `${file} is published`);
    }
    assert.deepEqual(files.filter((f) => /^(test|build|node_modules)\//.test(f) || f.endsWith(".sh")), []);
    const manifest = JSON.parse(await readFile(join(packageDir, "package.json"), "utf8")) as Record<string, any>;
    assert.equal(manifest["license"], "Apache-2.0");
    assert.equal(manifest["type"], "module");
    assert.deepEqual(manifest["dependencies"] ?? {}, {}, "no runtime dependencies");
    assert.equal(manifest["exports"]["."]["types"], "./dist/index.d.ts");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("the README's quickstart and await-using example run as written", async () => {
  const [quickstart, using] = await examples();
  assert.ok(quickstart && using, "the README marks two tested examples");
  const dir = await mkdtemp(join(tmpdir(), "leasehold-readme-"));
  try {
    await run("npm", ["pack", "--ignore-scripts", "--pack-destination", dir], packageDir);
    await writeFile(join(dir, "package.json"), JSON.stringify({ name: "readme-example", private: true, type: "module" }));
    await run("npm", ["install", "--offline", "--no-audit", "--no-fund", "./leasehold-0.1.0.tgz"], dir);
    // The quickstart under the least a project may have: no Node types, no disposable lib.
    // The await-using example as its text says: lib esnext.disposable.
    const projects = [
      { file: "quickstart.ts", code: quickstart, lib: ["ES2022", "DOM"] },
      { file: "using.ts", code: using, lib: ["ES2022", "DOM", "esnext.disposable"] },
    ];
    for (const { file, code, lib } of projects) {
      await writeFile(join(dir, file), code);
      const config = {
        compilerOptions: { target: "ES2022", module: "NodeNext", strict: true, lib, types: [], skipLibCheck: false },
        files: [file],
      };
      await writeFile(join(dir, "tsconfig.json"), JSON.stringify(config));
      await run(tsc, ["-p", "."], dir);
      const env: NodeJS.ProcessEnv = { ...process.env, LEASEHOLD_SERVER: URL_ };
      delete env["LEASEHOLD_API_KEY"];
      const output = await run(process.execPath, [file.replace(/\.ts$/, ".js")], dir, env);
      if (file === "quickstart.ts") assert.match(output, /^writing the report with fencing token \d+\n$/);
      else assert.match(output, /^held by lease (\S+) = \1\n$/);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("npm install of the package's folder, as the README's install says, builds it (prepare) and imports", async () => {
  // A copy of what a clone has: no node_modules, no dist.
  const dir = await mkdtemp(join(tmpdir(), "leasehold-folder-"));
  try {
    const pkg = join(dir, "typescript");
    await run("mkdir", [pkg], dir);
    const copied = ["package.json", "package-lock.json", "tsconfig.json", "src", "scripts", "README.md", "LICENSE"];
    await run("cp", ["-r", ...copied.map((f) => join(packageDir, f)), pkg], dir);
    const app = join(dir, "app");
    await run("mkdir", [app], dir);
    await writeFile(join(app, "package.json"), JSON.stringify({ name: "folder-install", private: true, type: "module" }));
    await run("npm", ["install", "--no-audit", "--no-fund", "../typescript"], app);
    const output = await run(process.execPath, ["--input-type=module", "-e", 'import("leasehold").then((m) => console.log(typeof m.Client))'], app);
    assert.equal(output, "function\n");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
