// The page's own reading of a file (frontend/src/local/): this worker holds the engine's model of
// one file and answers the page's questions about it as the server would, while the file uploads.
// Messages in: {id, file} (read it) or {id, question} (JSON); out: {id, ok} or {id, err}.
import init, { local_open, local_answer } from '/pkg/frontend.js';

const ready = init({ module_or_path: '/pkg/frontend_bg.wasm' });

self.onmessage = async ({ data }) => {
  try {
    await ready;
    if (data.file) {
      const bytes = new Uint8Array(await data.file.arrayBuffer());
      local_open(bytes, data.file.name);
      self.postMessage({ id: data.id, ok: '' });
    } else {
      self.postMessage({ id: data.id, ok: local_answer(data.question) });
    }
  } catch (e) {
    self.postMessage({ id: data.id, err: String(e) });
  }
};
