// Times the engine's parse, then parse and index, three times each on FILE in wasm (Node's V8,
// the engine Chromium runs a page's wasm with). Build first (see Cargo.toml).
//     node run.mjs FILE
import fs from 'fs';
const wasm = fs.readFileSync(new URL('target/wasm32-unknown-unknown/release/wasm_parse.wasm', import.meta.url));
const file = fs.readFileSync(process.argv[2]);
for (const [what, name] of [[1, 'parse'], [2, 'parse and index'], [3, 'parse, index, report, two timeline windows']]) {
  const times = [];
  let memory = 0;
  for (let i = 0; i < 3; i++) {
    const { instance } = await WebAssembly.instantiate(wasm, {});
    const e = instance.exports;
    const at = e.buffer(file.length);
    new Uint8Array(e.memory.buffer, at, file.length).set(file);
    const t = performance.now();
    e.parse(what);
    times.push(((performance.now() - t) / 1000).toFixed(3));
    memory = e.memory.buffer.byteLength;
  }
  console.log(`${name}: ${times.join(' ')} s (wasm memory ${(memory / 2 ** 20).toFixed(0)} MiB)`);
}
