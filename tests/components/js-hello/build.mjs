// Builds app.js into a wasi:http/proxy component with componentize-js.
//
//   npm ci && node build.mjs OUT_DIR        # writes OUT_DIR/jshello.wasm
//
// componentize-js 0.23.0's engine exports wasi:http@0.2.10, so the WIT it is given (the
// WASI 0.2.12 files in ../wit, shared with the other test components) is rewritten to that
// version first; 0.2.11 and 0.2.12 only add `exit-with-code`, which is dropped.
import { mkdtemp, readdir, readFile, rename, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { _setPreopens } from '@bytecodealliance/preview2-shim/filesystem';
import { componentize } from '@bytecodealliance/componentize-js';

const ENGINE_WASI = '0.2.10';
const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] ?? here);

// preview2-shim 0.26 starts with no preopens, and the WIT tools inside componentize-js read
// the WIT through it: give them the filesystem.
_setPreopens({ '/': '/' });

const wit = await mkdtemp(join(tmpdir(), 'js-hello-wit-'));
try {
  await mkdir(join(wit, 'deps'));
  const from = join(here, '..', 'wit');
  const rewrite = (text) =>
    text
      .replaceAll('@0.2.12', `@${ENGINE_WASI}`)
      .replace(/ *@since\(version = 0\.2\.12\)\n.*\n/g, '');
  for (const name of await readdir(join(from, 'deps'))) {
    const text = await readFile(join(from, 'deps', name), 'utf8');
    await writeFile(join(wit, 'deps', name), rewrite(text));
  }
  await writeFile(join(wit, 'world.wit'), rewrite(await readFile(join(from, 'world.wit'), 'utf8')));
  const source = await readFile(join(here, 'app.js'), 'utf8');
  const { component } = await componentize(source, { witPath: wit, worldName: 'proxy' });
  await mkdir(out, { recursive: true });
  await writeFile(join(out, '.jshello.wasm.part'), component);
  await rename(join(out, '.jshello.wasm.part'), join(out, 'jshello.wasm'));
} finally {
  await rm(wit, { recursive: true, force: true });
}
