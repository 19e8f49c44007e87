// `npm install ./clients/typescript` (or a git URL) runs this `prepare` script: it builds dist/,
// which installs from the registry ship already. npm links a folder without installing its
// devDependencies, so TypeScript (the one dev dependency the build needs, pinned by
// package-lock.json) is installed here first when it is missing.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const tsc = join(root, "node_modules", ".bin", "tsc");
if (!existsSync(tsc)) {
  execFileSync("npm", ["ci", "--ignore-scripts", "--no-audit", "--no-fund"], { cwd: root, stdio: "inherit" });
}
execFileSync(tsc, ["-p", "tsconfig.json"], { cwd: root, stdio: "inherit" });
