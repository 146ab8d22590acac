// The mixed session: debugpy debugs the Python code, msvm the Cells, in one DAP session
// (launch "pythonDebugging"). The adapter in its own process, driven by DebugClient;
// every wait is on an event, never a sleep.
const assert = require('assert');
const path = require('path');
const fs = require('fs');
const net = require('net');
const os = require('os');
const { DebugClient } = require('@vscode/debugadapter-testsupport');

const ROOT = path.resolve(__dirname, '..', '..');
const PYTHON = process.env.MSVM_PYTHON || path.join(ROOT, '.venv', 'bin', 'python');
const ADAPTER = path.join(__dirname, 'adapter.py');
const MIXED = path.join(__dirname, 'programs', 'mixed.py');
const NESTED = path.join(__dirname, 'programs', 'nested.py');
const FRAMES = path.join(__dirname, 'programs', 'frames.py');
const SPIN = path.join(__dirname, 'programs', 'spin.py');
const lineIn = (file, text) => fs.readFileSync(file, 'utf8').split('\n').findIndex((l) => l.includes(text)) + 1;
const lineOf = (text) => lineIn(MIXED, text);
const PY_BASE = 2 ** 30;     // ids at or above are debugpy's (renumbered), below msvm's

describe('mixed Python + Cell debugging (debugpy through the msvm adapter)', function () {
  this.timeout(90000);
  let dc;
  let output;

  // a new adapter process (each test starts one; a test that relaunches stops the old one first);
  // env: what to set in (a value undefined: to remove from) the adapter's and the debuggee's environment
  async function startClient(env = {}) {
    const all = { ...process.env, MSVM_CACHE_DIR: fs.mkdtempSync('/tmp/msvm-dap-k-'), ...env };
    for (const k of Object.keys(env)) if (env[k] === undefined) delete all[k];
    dc = new DebugClient(PYTHON, ADAPTER, 'msvm', { env: all });
    dc.defaultTimeout = 45000;
    dc.on('output', (e) => { output += e.body.output; });
    await dc.start();
  }

  beforeEach(async () => {
    output = '';
    await startClient();
  });
  afterEach(async function () {
    if (this.currentTest.state === 'failed') console.log(`--- Debug Console of the failed test ---\n${output.slice(-3000)}`);
    await dc.stop();
  });

  // launch with breakpoints on the lines holding `texts` (in `file`); resolves with the first stop
  async function launchWith(texts, extra = {}, file = MIXED, filters = null) {
    const lines = texts.map((t) => lineIn(file, t));
    const bpDone = dc.waitForEvent('initialized').then(async () => {
      if (filters) await dc.setExceptionBreakpointsRequest({ filters });
      return dc.setBreakpointsRequest({ source: { path: file }, breakpoints: lines.map((line) => ({ line })) });
    });
    const stopped = dc.waitForEvent('stopped');
    await dc.launch({ program: file, jitLevel: 'L1', ...extra });
    const bps = (await bpDone).body.breakpoints;
    await dc.configurationDoneRequest();
    return { bps, ev: await stopped, lines };
  }

  async function stack(threadId) {
    return (await dc.stackTraceRequest({ threadId })).body.stackFrames;
  }

  async function stepAndWait(kind, threadId, extra = {}) {
    const stopped = dc.waitForEvent('stopped');
    await dc[`${kind}Request`]({ threadId, ...extra });
    return stopped;
  }

  // continue (through any further stops: a fused instruction also stands for the lines it
  // fused, so a Cell breakpoint may stop twice) until the program ends
  async function runToEnd(threadId) {
    const terminated = dc.waitForEvent('terminated');
    let ended = false;
    terminated.then(() => { ended = true; });
    const again = () => dc.continueRequest({ threadId }).catch(() => undefined);
    dc.on('stopped', again);
    await again();
    await terminated;
    dc.removeListener('stopped', again);
    return ended;
  }

  async function varsOf(frameId, scopeName) {
    const scopes = (await dc.scopesRequest({ frameId })).body.scopes;
    const s = scopes.find((x) => x.name === scopeName);
    assert.ok(s, `no scope ${scopeName} in ${scopes.map((x) => x.name)}`);
    return (await dc.variablesRequest({ variablesReference: s.variablesReference })).body.variables;
  }

  it('a Python breakpoint stops in the host code; its variables come from debugpy', async () => {
    const { bps, ev } = await launchWith(['x = prepare(4)', 'y = x * 2.0']);
    assert.strictEqual(bps[0].verified, true, 'the Python line is debugpy\'s');
    assert.ok(bps[0].id >= PY_BASE);
    assert.strictEqual(bps[1].verified, true, 'the Cell line is msvm\'s');
    assert.ok(bps[1].id < PY_BASE);
    assert.strictEqual(ev.body.reason, 'breakpoint');
    assert.deepStrictEqual(ev.body.hitBreakpointIds, [bps[0].id]);
    assert.match(output, /Python debugging through debugpy/);
    const frames = await stack(ev.body.threadId);
    assert.strictEqual(frames[0].line, lineOf('x = prepare(4)'));
    assert.strictEqual(frames[0].name, '<module>');
    assert.ok(frames[0].id >= PY_BASE);
    // (no frame of msvm's package or its servers: by their directories in this checkout, not by a name that
    // the checkout's own path may hold, as a clone into a folder named msvm does)
    const ours = [path.join(ROOT, 'vm', 'msvm') + path.sep, path.join(ROOT, 'server') + path.sep];
    assert.ok(frames.every((f) => !ours.some((d) => (f.source?.path ?? '').startsWith(d))), 'no debugger frames');
    const globals = await varsOf(frames[0].id, 'Globals').catch(() => varsOf(frames[0].id, 'Locals'));
    assert.match(globals.find((v) => v.name === 'net').value, /Double/);
    const e = await dc.evaluateRequest({ expression: 'prepare(2).shape', frameId: frames[0].id, context: 'watch' });
    assert.strictEqual(e.body.result, '(2,)');
    // the Cell breakpoint is next
    const next = dc.waitForEvent('stopped');
    await dc.continueRequest({ threadId: ev.body.threadId });
    const cell = await next;
    assert.strictEqual(cell.body.reason, 'breakpoint');
    assert.deepStrictEqual(cell.body.hitBreakpointIds, [bps[1].id]);
    const st = await stack(cell.body.threadId);
    assert.match(st[0].name, /^Double\.construct @0x/);
    assert.strictEqual(st[st.length - 1].line, lineOf('y = net(x)'), 'the Python line that called the Cell is below it');
    await runToEnd(cell.body.threadId);
  });

  it('Python step into, out of and over a function, through debugpy', async () => {
    const { ev } = await launchWith(['x = prepare(4)']);
    const tid = ev.body.threadId;
    assert.strictEqual((await stepAndWait('stepIn', tid)).body.reason, 'step');
    let f = (await stack(tid))[0];
    assert.strictEqual(f.name, 'prepare');
    assert.strictEqual(f.line, lineOf('base = np.arange(n'));
    const locals = await varsOf(f.id, 'Locals');
    assert.strictEqual(locals.find((v) => v.name === 'n').value, '4');
    await stepAndWait('stepOut', tid);
    f = (await stack(tid))[0];
    assert.strictEqual(f.name, '<module>');
    assert.strictEqual(f.line, lineOf('x = prepare(4)'));
    await stepAndWait('next', tid);
    assert.strictEqual((await stack(tid))[0].line, lineOf('if "--thread" in sys.argv'));
    await stepAndWait('next', tid);
    assert.strictEqual((await stack(tid))[0].line, lineOf('if "--twice" in sys.argv'));
    await stepAndWait('next', tid);
    // over the Cell call: next does not stop inside it
    assert.strictEqual((await stack(tid))[0].line, lineOf('y = net(x)'));
    await stepAndWait('next', tid);
    f = (await stack(tid))[0];
    assert.strictEqual(f.line, lineOf('total = float('), 'next steps over the Cell');
    const y = (await varsOf(f.id, 'Globals').catch(() => varsOf(f.id, 'Locals'))).find((v) => v.name === 'y');
    assert.ok(y, 'the Cell\'s result is a Python variable');
  });

  it('step into a Cell from its Python line stops at its first instruction; step out returns to the next Python line', async () => {
    const { ev } = await launchWith(['y = net(x)']);
    const tid = ev.body.threadId;
    let st = await stack(tid);
    assert.strictEqual(st[0].line, lineOf('y = net(x)'));
    const before = (await dc.scopesRequest({ frameId: st[0].id })).body.scopes[0].variablesReference;
    const inCell = await stepAndWait('stepIn', tid);
    // what VS Code still asks about the Python stop it left is refused at once (pydevd would wait
    // for the thread, which the Cell holds, and hold every later request behind it)
    await assert.rejects(dc.variablesRequest({ variablesReference: before }), /thread is running/);
    assert.strictEqual(inCell.body.threadId, tid, 'one thread: msvm\'s stop is on debugpy\'s main thread');
    const threads = (await dc.threadsRequest()).body.threads;      // (VS Code asks at every stop)
    assert.ok(threads.some((t) => t.id === tid), JSON.stringify(threads));
    st = await stack(tid);
    assert.match(st[0].name, /^Double\.construct @0x0000 /);
    assert.strictEqual(st[0].line, lineOf('y = x * 2.0'));
    assert.ok(st[0].instructionPointerReference);
    assert.ok(st[0].id < PY_BASE, 'a Cell frame is msvm\'s');
    const caller = st.find((fr) => fr.name === '<module> (Python)');
    assert.ok(caller, `the Python caller is below the Cell: ${st.map((fr) => fr.name)}`);
    assert.strictEqual(caller.line, lineOf('y = net(x)'));
    // variables of both kinds while the Cell is stopped
    const cellLocals = await varsOf(st[0].id, 'Locals');
    assert.match(cellLocals.find((v) => v.name === 'x').value, /^Tensor\[float32, \(4,\)\] \[0, 1, 2, 3\]/);
    const pyLocals = await varsOf(caller.id, 'Locals');
    assert.match(pyLocals.find((v) => v.name === 'net').value, /Double/);
    // instruction steps inside the Cell are msvm's
    await stepAndWait('next', tid, { granularity: 'instruction' });
    assert.match((await stack(tid))[0].name, /^Double\.construct @0x0003 /);
    assert.doesNotMatch(output, /Frame skipped/, 'debugpy\'s note about the frames it skipped is not shown');
    const out = await stepAndWait('stepOut', tid);
    assert.strictEqual(out.body.threadId, tid);
    st = await stack(tid);
    assert.strictEqual(st[0].name, '<module>', 'debugpy\'s frame again');
    assert.strictEqual(st[0].line, lineOf('total = float('), 'the Python line after the call');
    const terminated = dc.waitForEvent('terminated');
    await dc.continueRequest({ threadId: tid });
    await terminated;
  });

  it('step into a Cell it already ran (the same shape again) stops at its first instruction too', async () => {
    const { ev } = await launchWith(['y = net(x)'], { args: ['--twice'] });
    const tid = ev.body.threadId;
    await stepAndWait('stepIn', tid);
    assert.match((await stack(tid))[0].name, /^Double\.construct @0x0000 /);
    await stepAndWait('stepOut', tid);
    assert.strictEqual((await stack(tid))[0].line, lineOf('total = float('));
  });

  it('stepping past the Cell\'s last instruction ends on the Python line after the call', async () => {
    const { ev } = await launchWith(['return ops.relu(y)']);
    const tid = ev.body.threadId;
    for (let k = 0; k < 20 && !/RETURN/.test((await stack(tid))[0].name); k++) {
      await stepAndWait('next', tid, { granularity: 'instruction' });
    }
    assert.match((await stack(tid))[0].name, /RETURN/);
    await stepAndWait('next', tid, { granularity: 'instruction' });
    const st = await stack(tid);
    assert.strictEqual(st[0].name, '<module>');
    assert.strictEqual(st[0].line, lineOf('total = float('));
    // and a continue from there runs to the end: no step is left pending on either side
    const terminated = dc.waitForEvent('terminated');
    await dc.continueRequest({ threadId: tid });
    await terminated;
  });

  // DAP's steps name a thread, not a frame: the frame selected is the last one a request named
  // (VS Code asks for its scopes when the user selects it)
  async function select(frameId) {
    return (await dc.scopesRequest({ frameId })).body.scopes;
  }

  it('with a Python frame below the Cell selected, next steps that frame: to its next line once the Cell returns', async () => {
    const { ev } = await launchWith(['y = x * 2.0'], { enableFusion: false }, FRAMES);
    const tid = ev.body.threadId;
    const st = await stack(tid);
    assert.deepStrictEqual(st.map((f) => f.name.replace(/ @.*/, '')), ['Double.construct', 'apply (Python)', '<module> (Python)']);
    const apply = st[1];
    // variables and evaluate on the Python frames under the Cell
    const locals = await varsOf(apply.id, 'Locals');
    assert.strictEqual(locals.find((v) => v.name === 'scale').value, '3');
    assert.strictEqual((await dc.evaluateRequest({ expression: 'scale * 2', frameId: apply.id, context: 'watch' })).body.result, '6');
    await select(apply.id);
    const stepped = await stepAndWait('next', tid);
    assert.strictEqual(stepped.body.reason, 'step');
    const after = await stack(tid);
    assert.strictEqual(after[0].name, 'apply', 'debugpy\'s frame: the Python code was stepped');
    assert.ok(after[0].id >= PY_BASE);
    assert.strictEqual(after[0].line, lineIn(FRAMES, 'doubled = scale'));
    const y = (await varsOf(after[0].id, 'Locals')).find((v) => v.name === 'y');
    assert.ok(y, 'the Cell returned into apply');
    // a later continue runs to the end: nothing of that step is left on either side
    const terminated = dc.waitForEvent('terminated');
    await dc.continueRequest({ threadId: tid });
    await terminated;
    assert.match(output, /back in the module 12/);
  });

  it('with an outer Python frame selected, next runs until the calls above it return to its next line; stepOut returns from the frame', async () => {
    const { ev } = await launchWith(['y = x * 2.0'], { enableFusion: false }, FRAMES);
    const tid = ev.body.threadId;
    let st = await stack(tid);
    await select(st[2].id);                      // <module>
    await stepAndWait('next', tid);
    st = await stack(tid);
    assert.strictEqual(st[0].name, '<module>');
    assert.strictEqual(st[0].line, lineIn(FRAMES, 'after = "back in the module"'));
    assert.ok(!st.some((f) => f.name === 'apply'), 'apply returned');
    await dc.disconnectRequest({});
    // again, stepOut from apply: stops in its caller, on the line that called it (as debugpy's stepOut does)
    await dc.stop();
    await startClient();
    const again = await launchWith(['y = x * 2.0'], { enableFusion: false }, FRAMES);
    st = await stack(again.ev.body.threadId);
    await select(st[1].id);                      // apply
    await stepAndWait('stepOut', again.ev.body.threadId);
    st = await stack(again.ev.body.threadId);
    assert.strictEqual(st[0].name, '<module>');
    assert.strictEqual(st[0].line, lineIn(FRAMES, 'out = apply(net, x)'));
  });

  it('a step from a selected Python frame stops first at a Cell breakpoint on the way; then nothing of it is left', async () => {
    const { ev } = await launchWith(['y = x * 2.0'], { enableFusion: false }, FRAMES);
    const tid = ev.body.threadId;
    const st = await stack(tid);
    const ins = (await dc.customRequest('disassemble', { memoryReference: st[0].instructionPointerReference, instructionCount: 12 })).body.instructions;
    const ret = ins.find((i) => /^RETURN/.test(i.instruction));
    const ibp = (await dc.customRequest('setInstructionBreakpoints', { breakpoints: [{ instructionReference: ret.address }] })).body.breakpoints;
    assert.strictEqual(ibp[0].verified, true);
    await select(st[1].id);                      // apply
    const hit = await stepAndWait('next', tid);
    assert.strictEqual(hit.body.reason, 'instruction breakpoint');
    assert.match((await stack(tid))[0].name, /^Double\.construct @0x[0-9a-f]+ RETURN/);
    const stops = [];
    dc.on('stopped', (e) => stops.push(e.body));
    const terminated = dc.waitForEvent('terminated');
    await dc.continueRequest({ threadId: tid });
    await terminated;
    assert.deepStrictEqual(stops, [], 'the Python step was cancelled when the Cell stopped first');
  });

  it('with the Cell frame selected again, next steps the Cell: the selection is the last frame a request named', async () => {
    const { ev } = await launchWith(['y = x * 2.0'], { enableFusion: false }, FRAMES);
    const tid = ev.body.threadId;
    const st = await stack(tid);
    await select(st[1].id);                                                                 // apply...
    await dc.evaluateRequest({ expression: 'x', frameId: st[0].id, context: 'watch' });     // ...then the Cell frame
    await stepAndWait('next', tid);
    const st2 = await stack(tid);
    assert.match(st2[0].name, /^Double\.construct @0x/, 'the Cell stepped, by line');
    assert.strictEqual(st2[0].line, lineIn(FRAMES, 'return ops.relu(y)'));
    // stepIn (and any instruction step) with a Python frame selected is the thread's: the Cell's next instruction
    await dc.customRequest('msvmSelectFrame', { threadId: tid, frameId: st2[2].id });
    await stepAndWait('stepIn', tid, { granularity: 'instruction' });
    const st3 = await stack(tid);
    assert.match(st3[0].name, /^Double\.construct @0x/);
    assert.ok(parseInt(st3[0].instructionPointerReference, 16) > parseInt(st2[0].instructionPointerReference, 16));
    // the extension's msvmSelectFrame (VS Code's activeStackItem) selects without asking for scopes
    await dc.customRequest('msvmSelectFrame', { threadId: tid, frameId: st3[1].id });
    await stepAndWait('next', tid);
    const f = (await stack(tid))[0];
    assert.strictEqual(f.name, 'apply');
    assert.strictEqual(f.line, lineIn(FRAMES, 'doubled = scale'));
    await runToEnd(tid);
  });

  it('step out from the Cell\'s last instruction stops on the Python line after the call', async () => {
    const { ev } = await launchWith(['y = x * 2.0'], { enableFusion: false }, FRAMES);
    const tid = ev.body.threadId;
    for (let k = 0; k < 20 && !/RETURN/.test((await stack(tid))[0].name); k++) {
      await stepAndWait('next', tid, { granularity: 'instruction' });
    }
    assert.match((await stack(tid))[0].name, /RETURN/);
    await stepAndWait('stepOut', tid);
    const st = await stack(tid);
    assert.strictEqual(st[0].name, 'apply');
    assert.strictEqual(st[0].line, lineIn(FRAMES, 'doubled = scale'));
  });

  it('justMyCode is passed to debugpy: false steps into library code, true steps over it', async () => {
    const { ev } = await launchWith(['text = json.dumps('], { justMyCode: false }, FRAMES);
    assert.match(output, /justMyCode: false/);
    await stepAndWait('stepIn', ev.body.threadId);
    const lib = (await stack(ev.body.threadId))[0];
    assert.match(lib.source.path, /[\\/]json[\\/]__init__\.py$/, JSON.stringify(lib));
    await dc.disconnectRequest({});
    await dc.stop();
    await startClient();
    const mine = await launchWith(['text = json.dumps('], { justMyCode: true }, FRAMES);
    await stepAndWait('stepIn', mine.ev.body.threadId);
    const f = (await stack(mine.ev.body.threadId))[0];
    assert.strictEqual(f.source.path, FRAMES);
    assert.strictEqual(f.line, lineIn(FRAMES, 'print(after'));
  });

  it('a Python breakpoint in another thread while the main thread runs a Cell: msvm pauses the Cell, each thread goes on by itself', async () => {
    const stops = [];
    let resolveBoth;
    const both = new Promise((resolve) => { resolveBoth = resolve; });
    const onStop = (e) => { stops.push(e.body); if (stops.length === 2) resolveBoth(); };
    dc.on('stopped', onStop);
    // --until-ended: the Cell runs until the test ends the program, so it is running at every pause below
    await launchWith(['note = "the main thread runs a Cell"'], { args: ['--until-ended'] }, SPIN);
    await both;
    dc.removeListener('stopped', onStop);
    const threads = (await dc.threadsRequest()).body.threads;
    const worker = threads.find((t) => t.name === 'worker');
    const main = threads.find((t) => t.name === 'MainThread');
    assert.ok(worker && main, JSON.stringify(threads));
    const [first, second] = stops;
    assert.strictEqual(first.threadId, worker.id);
    assert.strictEqual(first.reason, 'breakpoint');
    assert.strictEqual(second.threadId, main.id);
    assert.strictEqual(second.reason, 'pause');
    assert.strictEqual(second.preserveFocusHint, true, 'the focus stays on the thread that hit the breakpoint');
    assert.match(second.description, /while thread worker is stopped/);
    const m = await stack(main.id);
    assert.match(m[0].name, /^Spin\.construct @0x/);
    assert.strictEqual(m[m.length - 1].name, '<module> (Python)');
    assert.strictEqual(m[m.length - 1].line, lineIn(SPIN, 'acc = spin('));
    assert.strictEqual((await dc.evaluateRequest({ expression: 'n', frameId: m[m.length - 1].id, context: 'watch' })).body.result, '1000000');
    const w = await stack(worker.id);
    assert.strictEqual(w[0].name, 'worker');
    assert.strictEqual(w[0].line, lineIn(SPIN, 'note = "the main thread runs a Cell"'));
    assert.ok((await varsOf(w[0].id, 'Locals')).some((v) => v.name === 'main_ident'), 'the worker\'s variables (debugpy)');
    // the main thread steps by itself (the Cell frame selected); the worker stays stopped
    await select(m[0].id);
    await stepAndWait('next', main.id);
    assert.match((await stack(main.id))[0].name, /^Spin\.construct @0x/);
    assert.strictEqual((await stack(worker.id))[0].name, 'worker');
    // the worker steps by itself; the main thread's Cell stays stopped (its stop is said again)
    // both stops can come in one read from the adapter: one listener takes every event until the worker's
    // (two waitForEvent calls in turn would miss the second, dispatched before the first await resumes)
    const again = [];
    const stepped = new Promise((resolve) => {
      const onAgain = (e) => {
        again.push(e.body);
        if (e.body.threadId === worker.id) { dc.removeListener('stopped', onAgain); resolve(); }
      };
      dc.on('stopped', onAgain);
    });
    await dc.nextRequest({ threadId: worker.id });
    await stepped;
    assert.ok(again.some((e) => e.threadId === worker.id && e.reason === 'step'), JSON.stringify(again));
    assert.strictEqual((await stack(worker.id))[0].line, lineIn(SPIN, 'return note'));
    assert.match((await stack(main.id))[0].name, /^Spin\.construct @0x/);
    // the worker runs to its end; then the main thread continues, and pauses again where it runs
    const workerDone = new Promise((resolve) => dc.on('thread', (e) => { if (e.body.reason === 'exited' && e.body.threadId === worker.id) resolve(); }));
    await dc.continueRequest({ threadId: worker.id });
    await workerDone;
    await dc.continueRequest({ threadId: main.id });
    const paused = dc.waitForEvent('stopped');
    await dc.pauseRequest({ threadId: main.id });
    assert.strictEqual((await paused).body.reason, 'pause');
    assert.match((await stack(main.id))[0].name, /^Spin\.construct @0x/);
    const terminated = dc.waitForEvent('terminated');
    await dc.terminateRequest({});
    await terminated;
  });

  it('a Python breakpoint in another thread while the main thread runs Python: debugpy stops both, msvm pauses nothing', async () => {
    const { ev } = await launchWith(['note = "the main thread runs Python"'], { args: ['--python'] }, SPIN);
    const threads = (await dc.threadsRequest()).body.threads;
    const main = threads.find((t) => t.name === 'MainThread');
    assert.notStrictEqual(ev.body.threadId, main.id);
    assert.strictEqual(ev.body.allThreadsStopped, true);
    const m = await stack(main.id);
    assert.strictEqual(m[0].name, '<module>', JSON.stringify(m));
    assert.ok(m[0].id >= PY_BASE, 'debugpy\'s frame');
    assert.ok([lineIn(SPIN, 'while t.is_alive()'), lineIn(SPIN, 'time.sleep(0.01)')].includes(m[0].line), JSON.stringify(m[0]));
    await runToEnd(ev.body.threadId);
    assert.match(output, /acc 1000/);
  });

  it('a Python breakpoint in another thread while a Cell is stopped on the main thread', async () => {
    const stops = [];
    const both = new Promise((resolve) => dc.on('stopped', (e) => { stops.push(e.body); if (stops.length === 2) resolve(); }));
    await launchWith(['y = x * 2.0', 'note = "from the worker"'], { args: ['--thread'] });
    await both;
    const threads = (await dc.threadsRequest()).body.threads;
    const worker = threads.find((t) => t.name === 'worker');
    const main = threads.find((t) => t.name === 'MainThread');
    assert.ok(worker && main, JSON.stringify(threads));
    assert.deepStrictEqual(new Set(stops.map((s) => s.threadId)), new Set([main.id, worker.id]));
    const w = await stack(worker.id);
    assert.strictEqual(w[0].name, 'worker');
    assert.strictEqual(w[0].line, lineOf('note = "from the worker"'));
    assert.match((await stack(main.id))[0].name, /^Double\.construct @0x/);
    // the worker continues; the Cell stays stopped (its stop is said again) until it continues
    const restated = dc.waitForEvent('stopped');
    await dc.continueRequest({ threadId: worker.id });
    assert.strictEqual((await restated).body.threadId, main.id);
    assert.match((await stack(main.id))[0].name, /^Double\.construct @0x/);
    await runToEnd(main.id);
  });

  // A process that is not the debuggee connects to debugpy's loopback port and poses as its
  // debug server (pydevd): it answers pydevdAuthorize with a guessed token (or not at all)
  // and sends events. The adapter must drop it; the session must not show what it sent.
  function posingServer(port, token) {
    return new Promise((resolve) => {
      const sock = net.connect(port, '127.0.0.1');
      let buf = '';
      let asked = false;
      const send = (msg) => { const j = JSON.stringify(msg); sock.write(`Content-Length: ${Buffer.byteLength(j)}\r\n\r\n${j}`); };
      sock.on('data', (d) => {
        buf += d.toString();
        const m = /"command":\s*"pydevdAuthorize".*?"seq":\s*(\d+)|"seq":\s*(\d+)[^}]*"command":\s*"pydevdAuthorize"/.exec(buf);
        if (m && !asked && token !== undefined) {
          asked = true;
          send({ seq: 1, type: 'response', request_seq: Number(m[1] || m[2]), command: 'pydevdAuthorize', success: true, body: { clientAccessToken: token } });
          send({ seq: 2, type: 'event', event: 'output', body: { category: 'console', output: 'FOREIGN OUTPUT\n' } });
          send({ seq: 3, type: 'event', event: 'stopped', body: { reason: 'breakpoint', threadId: 4242, allThreadsStopped: true } });
        }
      });
      sock.on('error', () => undefined);
      sock.on('close', () => resolve({ asked: /pydevdAuthorize/.test(buf) }));
    });
  }

  it('a foreign connection to debugpy\'s port cannot pose as the debuggee: refused, nothing it sends reaches the session', async () => {
    const log = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'msvm-dap-log-')), 'dap.log');
    await dc.stop();
    dc = new DebugClient(PYTHON, ADAPTER, 'msvm', { env: { ...process.env, MSVM_DAP_LOG: log, MSVM_CACHE_DIR: fs.mkdtempSync('/tmp/msvm-dap-k-') } });
    dc.defaultTimeout = 45000;
    dc.on('output', (e) => { output += e.body.output; });
    const foreignStops = [];
    dc.on('stopped', (e) => { if (e.body.threadId === 4242) foreignStops.push(e.body); });
    await dc.start();
    const { ev } = await launchWith(['x = prepare(4)']);
    const waiting = fs.readFileSync(log, 'utf8').split('\n').find((l) => l.includes('"debugpyWaitingForServer"'));
    const port = JSON.parse(waiting.slice(waiting.indexOf('{'))).body.port;
    assert.ok(port > 0);
    // one that never answers, then one with a guessed token: the adapter cuts both off
    const silent = posingServer(port, undefined);
    const guessing = posingServer(port, '0'.repeat(64));
    assert.strictEqual((await silent).asked, true, 'it was asked for the token');
    assert.strictEqual((await guessing).asked, true);
    // the real session goes on, and shows nothing the posing servers sent
    const tid = ev.body.threadId;
    await stepAndWait('next', tid);
    assert.strictEqual((await stack(tid))[0].line, lineOf('if "--thread" in sys.argv'));
    await runToEnd(tid);
    assert.doesNotMatch(output, /FOREIGN/);
    assert.deepStrictEqual(foreignStops, []);
  });

  it('an uncaught exception in the Python code stops where it was raised (debugpy)', async () => {
    const { ev } = await launchWith([], { args: ['--crash'] }, MIXED, ['uncaught', 'msvm-cell-errors']);
    assert.strictEqual(ev.body.reason, 'exception');
    const st = await stack(ev.body.threadId);
    const f = st[0];
    assert.strictEqual(f.line, lineOf('raise ValueError('));
    const info = await dc.exceptionInfoRequest({ threadId: ev.body.threadId });
    assert.match(info.body.exceptionId, /ValueError/);
    assert.match(info.body.description, /host code failed after total=12/);
    const exited = dc.waitForEvent('exited');
    await dc.continueRequest({ threadId: ev.body.threadId });
    assert.strictEqual((await exited).body.exitCode, 1);
  });

  it('an exception inside a Cell stops in the Cell (msvm), then in the Python line that called it (debugpy)', async () => {
    const { ev } = await launchWith([], { args: ['--fail'] }, NESTED, ['uncaught', 'msvm-cell-errors']);
    assert.strictEqual(ev.body.reason, 'exception');
    assert.match(ev.body.description, /FILL .* failed in Grow\.construct: MemoryError/);
    const tid = ev.body.threadId;
    const f = (await stack(tid))[0];
    assert.match(f.name, /^Grow\.construct @0x/);
    assert.strictEqual((await dc.exceptionInfoRequest({ threadId: tid })).body.exceptionId, 'ExecutionError');
    const again = dc.waitForEvent('stopped');
    await dc.continueRequest({ threadId: tid });
    const py = await again;
    assert.strictEqual(py.body.reason, 'exception');
    const pst = await stack(tid);
    const top = pst[0];
    assert.ok(pst.every((fr) => fr.source?.path !== '<string>'), 'the debuggee\'s boot is not shown');
    assert.strictEqual(top.line, lineIn(NESTED, 'Grow()(x, 10**6)'));
    assert.ok(top.id >= PY_BASE);
    const exited = dc.waitForEvent('exited');
    await dc.continueRequest({ threadId: tid });
    assert.strictEqual((await exited).body.exitCode, 1);
  });

  it('with pythonDebugging false it is msvm alone, and the Debug Console says so', async () => {
    const { bps, ev } = await launchWith(['x = prepare(4)', 'y = x * 2.0'], { pythonDebugging: false });
    assert.strictEqual(bps[0].verified, false);
    assert.match(bps[0].message, /no msvm bytecode/);
    assert.match(output, /Python debugging is off/);
    assert.strictEqual(ev.body.threadId, 1);
    assert.strictEqual(ev.body.allThreadsStopped, true);
    const st = await stack(1);
    assert.match(st[0].name, /^Double\.construct @0x0000/);
    assert.strictEqual(st[st.length - 1].name, '<module> (Python)');
    // msvm alone steps no Python frame: with one selected, next still steps the Cell
    await dc.customRequest('msvmSelectFrame', { threadId: 1, frameId: st[st.length - 1].id });
    await stepAndWait('next', 1);
    assert.match((await stack(1))[0].name, /^Double\.construct @0x/);
    await runToEnd(1);
  });

  it('pause stops the program where it is: in a Cell (msvm) or on a Python line (debugpy)', async () => {
    const loop = path.join(__dirname, 'programs', 'loop.py');
    // (a day: the loop runs until the test ends the program, so it runs at the pause however slow the machine)
    await Promise.all([dc.configurationSequence(), dc.launch({ program: loop, jitLevel: 'L1', env: { LOOP_SECONDS: '86400' } })]);
    const threads = (await dc.threadsRequest()).body.threads;
    const main = threads.find((t) => t.name === 'MainThread');
    // a thread that runs has no frames to show: one label frame says so
    const running = await stack(main.id);
    assert.strictEqual(running.length, 1);
    assert.strictEqual(running[0].presentationHint, 'label');
    assert.match(running[0].name, /^running/);
    assert.deepStrictEqual((await dc.scopesRequest({ frameId: running[0].id })).body.scopes, []);
    const stopped = dc.waitForEvent('stopped', 20000);
    await dc.pauseRequest({ threadId: main.id });
    const ev = await stopped;
    assert.strictEqual(ev.body.reason, 'pause');
    assert.strictEqual(ev.body.threadId, main.id);
    const f = (await stack(main.id))[0];
    if (f.id < PY_BASE) assert.match(f.name, /^Step\.construct @0x/);
    else assert.ok(f.name === '<module>' && f.source.path === loop, JSON.stringify(f));
    const terminated = dc.waitForEvent('terminated');
    await dc.terminateRequest({});
    await terminated;
  });

  it('without debugpy it is msvm alone, and the Debug Console says debugpy is missing', async () => {
    await dc.stop();
    const hidden = path.join(__dirname, 'programs', 'no_debugpy');
    await startClient({ PYTHONPATH: [hidden, process.env.PYTHONPATH].filter(Boolean).join(path.delimiter) });
    const { bps, ev } = await launchWith(['x = prepare(4)', 'y = x * 2.0']);
    assert.match(output, /debugpy is not installed/);
    assert.strictEqual(bps[0].verified, false, 'no Python breakpoints without debugpy');
    assert.strictEqual(ev.body.threadId, 1);
    assert.match((await stack(1))[0].name, /^Double\.construct @0x0000/);
    await runToEnd(1);
  });
  it('with a debugpy of another version it is msvm alone, and the Debug Console names the version', async () => {
    await dc.stop();
    const other = path.join(__dirname, 'programs', 'other_debugpy');
    await startClient({ PYTHONPATH: [other, process.env.PYTHONPATH].filter(Boolean).join(path.delimiter),
      MSVM_DEBUGPY_UNTESTED: undefined });
    const { bps, ev } = await launchWith(['x = prepare(4)', 'y = x * 2.0']);
    assert.match(output, /Python debugging is off: debugpy 1\.9\.0 is installed, and msvm's mixed-mode debugging is written against debugpy 1\.8\.22's internals/);
    assert.strictEqual(bps[0].verified, false, 'no Python breakpoints: debugpy is not used');
    assert.strictEqual(ev.body.threadId, 1);
    const st = await stack(1);
    assert.match(st[0].name, /^Double\.construct @0x0000/);
    assert.strictEqual(st[st.length - 1].name, '<module> (Python)');
    await runToEnd(1);
  });
});
