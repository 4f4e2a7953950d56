// Builds the Explorer into ../dist: dist/index.html and the bundled,
// minified, content-hashed script and stylesheet under dist/assets.
// The output is deterministic, so a rebuild of unchanged sources changes
// nothing that git sees.
import * as esbuild from "esbuild";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.join(here, "..", "dist");
const assets = path.join(dist, "assets");

await rm(dist, { recursive: true, force: true });
await mkdir(assets, { recursive: true });

const result = await esbuild.build({
  absWorkingDir: here,
  entryPoints: { app: "src/main.ts" },
  bundle: true,
  minify: true,
  format: "esm",
  target: ["es2022", "chrome100", "firefox100", "safari15"],
  outdir: assets,
  entryNames: "[name]-[hash]",
  assetNames: "[name]-[hash]",
  legalComments: "eof",
  metafile: true,
  logLevel: "warning",
});

let js, css;
for (const [file, out] of Object.entries(result.metafile.outputs)) {
  if (out.entryPoint === "src/main.ts") {
    js = path.basename(file);
    css = out.cssBundle && path.basename(out.cssBundle);
  }
}
if (!js || !css) throw new Error("build: no script or stylesheet came out of src/main.ts");

const page = (await readFile(path.join(here, "src", "index.html"), "utf8"))
  .replaceAll("%APP_JS%", `/assets/${js}`)
  .replaceAll("%APP_CSS%", `/assets/${css}`);
await writeFile(path.join(dist, "index.html"), page);

for (const [file, out] of Object.entries(result.metafile.outputs)) {
  console.log(`${path.relative(path.join(here, ".."), path.resolve(here, file)).padEnd(36)} ${(out.bytes / 1024).toFixed(1)} KiB`);
}
