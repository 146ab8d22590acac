// The panels' HTML shell: strict CSP with a nonce, scripts and styles only from the extension.
export function pageHtml(opts: { title: string; script: string; style: string; nonce: string; cspSource: string;
  page: 'bytecode' | 'heatmap' | 'cache' }): string {
  const csp = [`default-src 'none'`, `img-src ${opts.cspSource} data:`, `style-src ${opts.cspSource}`,
    `script-src 'nonce-${opts.nonce}'`, `font-src ${opts.cspSource}`].join('; ');
  return `<!DOCTYPE html>
<html lang="en"><head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${opts.style}">
<title>${escapeHtml(opts.title)}</title>
</head><body data-page="${opts.page}">
<div id="app"><p class="muted">Loading…</p></div>
<script nonce="${opts.nonce}" src="${opts.script}"></script>
</body></html>`;
}

export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]!));
}
