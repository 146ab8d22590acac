// The three webview panels: bytecode (beside the source), JIT heatmap, cache table.
// Each is a thin host: it fetches data (from the language server or the last events),
// posts it to the page, and answers the page's messages.
import * as path from 'path';
import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';
import { pageHtml } from './html';
import { cellForLine, colorIndices, instructionsAtLine, lineColors, nonce, parseFromPage } from './logic';
import type { BytecodeResult, CacheStats, Profile, ToPage } from './protocol';

const PALETTE = ['rgba(230,159,0,0.13)', 'rgba(86,180,233,0.13)', 'rgba(0,158,115,0.13)', 'rgba(240,228,66,0.13)',
  'rgba(0,114,178,0.13)', 'rgba(213,94,0,0.13)', 'rgba(204,121,167,0.13)', 'rgba(153,153,153,0.13)'];

abstract class Panel {
  panel: vscode.WebviewPanel | undefined;
  ready = false;
  queue: ToPage[] = [];

  constructor(protected ctx: vscode.ExtensionContext, private kind: 'bytecode' | 'heatmap' | 'cache',
    private title: string) {}

  protected open(column: vscode.ViewColumn, preserveFocus = false): vscode.WebviewPanel {
    if (this.panel) {
      this.panel.reveal(column, preserveFocus);
      return this.panel;
    }
    const dist = vscode.Uri.file(path.join(this.ctx.extensionPath, 'dist', 'webview'));
    const p = vscode.window.createWebviewPanel(`msvm.${this.kind}`, this.title, { viewColumn: column, preserveFocus },
      { enableScripts: true, localResourceRoots: [dist], retainContextWhenHidden: true });
    const n = nonce();
    p.webview.html = pageHtml({ title: this.title, page: this.kind, nonce: n, cspSource: p.webview.cspSource,
      script: p.webview.asWebviewUri(vscode.Uri.joinPath(dist, 'main.js')).toString(),
      style: p.webview.asWebviewUri(vscode.Uri.joinPath(dist, 'style.css')).toString() });
    p.webview.onDidReceiveMessage((raw) => {
      const msg = parseFromPage(raw);
      if (!msg) return;
      if (msg.type === 'ready') {
        this.ready = true;
        for (const m of this.queue.splice(0)) void p.webview.postMessage(m);
      } else {
        void this.onMessage(msg);
      }
    });
    p.onDidDispose(() => { this.panel = undefined; this.ready = false; this.disposed(); });
    this.panel = p;
    return p;
  }

  post(msg: ToPage): void {
    if (!this.panel) return;
    if (this.ready) void this.panel.webview.postMessage(msg);
    else this.queue = [...this.queue.filter((m) => m.type !== msg.type), msg];
  }

  protected async onMessage(msg: ReturnType<typeof parseFromPage>): Promise<void> {
    if (msg?.type === 'reveal') await reveal(msg.file ? vscode.Uri.file(msg.file) : undefined, msg.range);
  }

  protected disposed(): void { /* subclasses clean up */ }
}

let lastSource: vscode.Uri | undefined;

async function reveal(uri: vscode.Uri | undefined, range: { start: { line: number; character: number }; end: { line: number; character: number } }) {
  const target = uri ?? lastSource;
  if (!target) return;
  const doc = await vscode.workspace.openTextDocument(target);
  const shown = vscode.window.visibleTextEditors.find((e) => e.document.uri.toString() === doc.uri.toString());
  const editor = await vscode.window.showTextDocument(doc, { viewColumn: shown?.viewColumn ?? vscode.ViewColumn.One, preserveFocus: false });
  const r = new vscode.Range(range.start.line, range.start.character, range.end.line, range.end.character);
  editor.selection = new vscode.Selection(r.start, r.start);
  editor.revealRange(r, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
}

export class BytecodePanel extends Panel {
  uri: vscode.Uri | undefined;
  cell: string | undefined;
  data: BytecodeResult | undefined;
  decorations = PALETTE.map((c) => vscode.window.createTextEditorDecorationType({ backgroundColor: c, isWholeLine: true }));
  private timer: NodeJS.Timeout | undefined;
  private subs: vscode.Disposable[] = [];

  constructor(ctx: vscode.ExtensionContext, private client: () => LanguageClient | undefined) {
    super(ctx, 'bytecode', 'MS Bytecode');
    this.subs.push(
      vscode.workspace.onDidChangeTextDocument((e) => {
        if (this.panel && this.uri && e.document.uri.toString() === this.uri.toString()) {
          clearTimeout(this.timer);
          this.timer = setTimeout(() => void this.refresh(), 300);
        }
      }),
      vscode.window.onDidChangeTextEditorSelection((e) => this.cursorMoved(e.textEditor)),
      vscode.window.onDidChangeVisibleTextEditors(() => this.decorate()));
    ctx.subscriptions.push(...this.subs, ...this.decorations);
  }

  async show(uri: vscode.Uri, cell?: string, line?: number): Promise<void> {
    this.uri = uri;
    lastSource = uri;
    if (!cell && line !== undefined) {
      const lenses = await vscode.commands.executeCommand<vscode.CodeLens[]>('vscode.executeCodeLensProvider', uri) ?? [];
      const cells = lenses.filter((l) => l.command?.command === 'msvm.viewBytecode')
        .map((l) => ({ name: String(l.command!.arguments![1]), line: l.range.start.line }));
      // the Cell around the cursor; above every Cell, the first one
      cell = cellForLine(cells, line) ?? cells.sort((a, b) => a.line - b.line)[0]?.name;
    }
    this.cell = cell;
    this.open(vscode.ViewColumn.Beside, true);
    await this.refresh(line);
  }

  async refresh(line?: number): Promise<void> {
    const c = this.client();
    if (!c || !this.uri || !this.panel) return;
    const fused = vscode.workspace.getConfiguration('msvm').get<boolean>('enableFusion', true);
    const params: Record<string, unknown> = { uri: this.uri.toString(), fused };
    if (this.cell) params.cell = this.cell;
    else if (line !== undefined) params.position = { line, character: 0 };
    const data = await c.sendRequest<BytecodeResult>('msvm/bytecode', params);
    if (data.error && this.data && !data.instructions.length && this.data.cell === (data.cell ?? this.data.cell)) {
      // mid-edit: keep showing the last good bytecode, with the error on top
      this.post({ type: 'bytecode', data: { ...this.data, error: undefined }, uri: this.uri.toString(), colors: colorIndices(this.data.instructions) });
      return;
    }
    this.data = data;
    if (data.cell) this.cell = data.cell;
    if (this.panel) this.panel.title = `MS Bytecode: ${data.cell ?? path.basename(this.uri.fsPath)}`;
    this.post({ type: 'bytecode', data, uri: this.uri.toString(), colors: colorIndices(data.instructions) });
    this.decorate();
  }

  private editorFor(): vscode.TextEditor | undefined {
    return vscode.window.visibleTextEditors.find((e) => e.document.uri.toString() === this.uri?.toString());
  }

  decorate(): void {
    const ed = this.editorFor();
    if (!ed) return;
    const byColor: vscode.Range[][] = PALETTE.map(() => []);
    if (this.panel && this.data) {
      for (const [line, color] of lineColors(this.data.instructions, PALETTE.length)) byColor[color].push(new vscode.Range(line, 0, line, 0));
    }
    this.decorations.forEach((d, k) => ed.setDecorations(d, byColor[k]));
  }

  cursorMoved(ed: vscode.TextEditor): void {
    if (!this.panel || !this.data || ed.document.uri.toString() !== this.uri?.toString()) return;
    this.post({ type: 'highlight', offsets: instructionsAtLine(this.data.instructions, ed.selection.active.line) });
  }

  protected disposed(): void {
    this.data = undefined;
    this.decorate();
    const ed = this.editorFor();
    if (ed) this.decorations.forEach((d) => ed.setDecorations(d, []));
  }
}

export class HeatmapPanel extends Panel {
  profile: Profile | null = null;
  constructor(ctx: vscode.ExtensionContext) { super(ctx, 'heatmap', 'msvm JIT Heatmap'); }
  show(): void { this.open(vscode.ViewColumn.Active); this.post({ type: 'heatmap', profile: this.profile }); }
  setProfile(p: Profile | null): void { this.profile = p; this.post({ type: 'heatmap', profile: p }); }
}

export class CachePanel extends Panel {
  stats: CacheStats | null = null;
  constructor(ctx: vscode.ExtensionContext) { super(ctx, 'cache', 'msvm JIT Cache'); }
  show(): void { this.open(vscode.ViewColumn.Active); this.post({ type: 'cache', stats: this.stats }); }
  setStats(s: CacheStats): void { this.stats = s; this.post({ type: 'cache', stats: s }); }
}
