// Path logic of the extension that needs node's path module (kept out of logic.ts, which the
// panel pages bundle for the browser): unit-tested in tests/extension.
import * as path from 'path';

/** Whether file lies in one of the folders: an untrusted workspace's own interpreter is not run. */
export function isInside(file: string, folders: string[]): boolean {
  const f = path.resolve(file);
  return folders.some((d) => {
    const rel = path.relative(path.resolve(d), f);
    return rel === '' || (rel !== '..' && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel));
  });
}
