// The panels' HTML shell: strict CSP with a nonce, scripts and styles only from the extension.
// It is the only HTML the extension writes; the pages build everything else with DOM calls
// (webview/main.ts), so no program data is ever parsed as HTML.
export function pageHtml(opts: { title: string; script: string; style: string; nonce: string; cspSource: string;
  page: 'bytecode' | 'heatmap' | 'cache' }): string {
  if (!/^[A-Za-z0-9]+$/.test(opts.nonce)) throw new Error('a nonce is letters and digits');
  const csp = [`default-src 'none'`, `img-src ${opts.cspSource} data:`, `style-src ${opts.cspSource}`,
    `script-src 'nonce-${opts.nonce}'`, `font-src ${opts.cspSource}`].join('; ');
  return `<!DOCTYPE html>
<html lang="en"><head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${escapeAttr(csp)}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${escapeAttr(opts.style)}">
<title>${escapeHtml(opts.title)}</title>
</head><body data-page="${escapeAttr(opts.page)}">
<div id="app"><p class="muted">Loading…</p></div>
<script nonce="${opts.nonce}" src="${escapeAttr(opts.script)}"></script>
</body></html>`;
}

/** Text for an HTML element or a quoted attribute. */
export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]!));
}

/** A double-quoted attribute's value (single quotes kept: a CSP is full of them). */
function escapeAttr(s: string): string {
  return s.replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]!));
}
