// Hostile data for the panel pages: every leaf of a sample message (string or number)
// replaced by markup that would run or add elements if a page parsed it as HTML.

/** The payload put at one path of a message; the path makes each one findable. */
export function payload(path: string): string {
  return `<img src=x onerror="__pwned.push('${path}')"></script><script>__pwned.push(1)</script>` +
    `"' onmouseover=__pwned.push(2) \${__pwned.push(3)} <b id="pwn">${path}</b>`;
}

/** A copy of v with every string and number leaf replaced by payload(its path). */
export function poison(v: unknown, path = ''): unknown {
  if (Array.isArray(v)) return v.map((x, k) => poison(x, `${path}[${k}]`));
  if (v && typeof v === 'object') {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, poison(x, path ? `${path}.${k}` : k)]));
  }
  if (typeof v === 'string' || typeof v === 'number') return payload(path);
  return v;
}

/** The value at a path made by poison (`a.b[0].c`). */
export function at(v: unknown, path: string): unknown {
  for (const part of path.match(/[^.[\]]+/g) ?? []) v = (v as Record<string, unknown>)[part];
  return v;
}
