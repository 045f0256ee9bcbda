// LangGraph's React hook `useStream` (@langchain/langgraph-sdk/react) and its `Client`, unmodified, rendered
// headless under node (react-test-renderer, a concurrent root as in a browser) against a server speaking
// LangGraph's API.
//
//   node use_stream.mjs URL SCENARIO [VARIANT]
//
// Prints one JSON line per step ({"step": name, ...}); a step with "wait": true waits for a line on stdin before
// the script goes on (the test checks or changes something on the server meanwhile). A failure prints
// {"step": "failed", "error": ..., "trace": [...]} and exits 1. The script never sleeps: it waits for what the hook
// renders, and a wait that is not met within LIMIT_MS fails it.

import { createInterface } from "node:readline";
import { createElement, useEffect, useState } from "react";
import TestRenderer from "react-test-renderer";
import { Client } from "@langchain/langgraph-sdk";
import { useStream } from "@langchain/langgraph-sdk/react";

const [url, scenario, variant] = process.argv.slice(2);
const LIMIT_MS = 15000; // a guard against a wait that is never met, not a delay

/** `window.sessionStorage` for the hook's `reconnectOnMount`: it outlives a reload of the page, as in a tab. */
class MemoryStorage {
  #items = new Map();
  get length() {
    return this.#items.size;
  }
  key(index) {
    return [...this.#items.keys()][index] ?? null;
  }
  getItem(key) {
    return this.#items.has(key) ? this.#items.get(key) : null;
  }
  setItem(key, value) {
    this.#items.set(key, String(value));
  }
  removeItem(key) {
    this.#items.delete(key);
  }
  clear() {
    this.#items.clear();
  }
  entries() {
    return Object.fromEntries(this.#items);
  }
}

const storage = new MemoryStorage();
globalThis.window = { sessionStorage: storage };

/** What happened, for the report of a failure: every request and every rendered list of messages. */
const trace = [];
const started = Date.now();
function note(line) {
  trace.push(`${String(Date.now() - started).padStart(5)} ms ${line}`);
}

function emit(step, data = {}) {
  process.stdout.write(`${JSON.stringify({ step, ...data })}\n`);
}

const stdin = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

/** Tell the test where the script is, and wait until it says go on. */
async function pause(step, data = {}) {
  emit(step, { ...data, wait: true });
  const { done } = await stdin.next();
  if (done) throw new Error(`stdin was closed while waiting after "${step}"`);
}

function messageView(message) {
  const view = {
    type: message.type,
    content: typeof message.content === "string" ? message.content : JSON.stringify(message.content),
    id: message.id ?? null,
  };
  if (message.tool_calls?.length) {
    view.tool_calls = message.tool_calls.map((call) => ({ id: call.id, name: call.name, args: call.args }));
  }
  if (message.tool_call_id) view.tool_call_id = message.tool_call_id;
  return view;
}

/** `experimental_branchTree` in short: a node is its checkpoint's last message, a fork the list of its branches. */
function treeView(sequence) {
  return sequence.items.map((item) => {
    if (item.type === "fork") return { fork: item.items.map(treeView) };
    const messages = item.value.values?.messages ?? [];
    return messages.length ? messages.at(-1).content : "";
  });
}

/**
 * One browser page showing the hook. Every request the hook's client sends goes through the page's `fetch` (the
 * client's `callerOptions.fetch`), which hands it to node's own fetch and writes it down; `close` drops them all,
 * as closing or reloading the tab does.
 */
class Page {
  constructor(name, { threadId = null, reconnectOnMount = false } = {}) {
    this.name = name;
    this.options = { threadId, reconnectOnMount };
    this.requests = [];
    this.created = []; // the hook's onCreated: the run id it took from the Content-Location header
    this.metadata = []; // the streams' `metadata` events
    this.errors = []; // the hook's onError
    this.interruptsSeen = []; // every `__interrupt__` of the values the hook showed
    this.view = null;
    this.handle = null;
    this.waiters = new Set();
    this.closed = new AbortController();
  }

  fetch = async (input, init = {}) => {
    if (this.closed.signal.aborted) throw new DOMException(`${this.name} is closed`, "AbortError");
    const signal = init.signal ? AbortSignal.any([init.signal, this.closed.signal]) : this.closed.signal;
    const target = new URL(typeof input === "string" ? input : input.url);
    const entry = { method: (init.method ?? "GET").toUpperCase(), path: target.pathname + target.search };
    const lastEventId = new Headers(init.headers ?? {}).get("last-event-id");
    if (lastEventId != null) entry.lastEventId = lastEventId;
    if (typeof init.body === "string" && init.body) entry.body = JSON.parse(init.body);
    this.requests.push(entry);
    note(`${this.name}: ${entry.method} ${entry.path}${lastEventId != null ? ` (Last-Event-ID ${lastEventId})` : ""}`);
    let response;
    try {
      response = await fetch(input, { ...init, signal });
    } catch (error) {
      note(`${this.name}: ${error.name} for ${entry.method} ${entry.path}: ${error.message} (${signal.reason})`);
      throw error;
    }
    entry.status = response.status;
    const where = response.headers.get("content-location");
    if (where != null) entry.contentLocation = where;
    note(`${this.name}: ${response.status} for ${entry.method} ${entry.path}`);
    return response;
  };

  mount() {
    const page = this;
    function Chat() {
      const [threadId, setThreadId] = useState(page.options.threadId);
      const stream = useStream({
        apiUrl: url,
        assistantId: "agent",
        threadId,
        onThreadId: setThreadId,
        reconnectOnMount: page.options.reconnectOnMount,
        messagesKey: "messages",
        fetchStateHistory: true,
        callerOptions: { fetch: page.fetch },
        onCreated: (run) => page.created.push(run),
        onMetadataEvent: (data) => page.metadata.push(data),
        onError: (error) => page.errors.push(String(error?.message ?? error)),
      });
      const view = {
        threadId,
        isLoading: stream.isLoading,
        error: stream.error == null ? null : String(stream.error.message ?? stream.error),
        messages: stream.messages.map(messageView),
        interrupt: stream.interrupt ?? null,
        valuesInterrupt: stream.values?.__interrupt__ ?? null,
        history: stream.history.map((state) => state.checkpoint.checkpoint_id),
        tree: treeView(stream.experimental_branchTree),
        branch: stream.branch,
      };
      // After the commit's effects, the hook's own included (they run in order): a step taken on this view acts on
      // the page as a user would, once it has settled.
      useEffect(() => page.rendered(stream, view));
      return null;
    }
    this.renderer = TestRenderer.create(createElement(Chat));
    return this;
  }

  rendered(handle, view) {
    this.handle = handle;
    this.view = view;
    const seen = view.valuesInterrupt == null ? null : JSON.stringify(view.valuesInterrupt);
    if (seen != null && !this.interruptsSeen.some((i) => JSON.stringify(i) === seen)) {
      this.interruptsSeen.push(view.valuesInterrupt);
    }
    const shown = view.messages.map((m) => m.content || (m.tool_calls ? "(tool call)" : m.type)).join(" | ");
    note(`${this.name}: rendered ${view.isLoading ? "loading" : "idle"} [${shown}]`);
    for (const check of [...this.waiters]) check();
  }

  /** The page's view once `predicate(view)` holds (at once if it does now). */
  until(what, predicate) {
    return new Promise((resolve, reject) => {
      let timer;
      const check = () => {
        if (this.view == null || !predicate(this.view)) return;
        clearTimeout(timer);
        this.waiters.delete(check);
        resolve(this.view);
      };
      timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(new Error(`${this.name}: ${what} was not shown within ${LIMIT_MS} ms; shown: ${JSON.stringify(this.view)}`));
      }, LIMIT_MS);
      this.waiters.add(check);
      check();
    });
  }

  /** The requests sent since `mark` (a length of `this.requests`). */
  since(mark) {
    return this.requests.slice(mark);
  }

  close() {
    this.closed.abort();
    this.renderer.unmount();
  }
}

const idle = (view) => !view.isLoading;
const human = (content) => ({ messages: [{ type: "human", content }] });
const shows = (view, content) => view.messages.some((m) => m.content === content);
const showsToolCall = (view) => view.messages.some((m) => m.tool_calls?.length);

/** Read a stream of the client until `stop(part)` holds (or it ends): every part read, as {id, event, data}. */
async function readUntil(stream, stop = () => false) {
  const parts = [];
  for await (const part of stream) {
    parts.push({ id: part.id ?? null, event: part.event, data: part.data });
    if (stop(part)) break;
  }
  return parts;
}

const scenarios = {
  /** 1 and 2: a thread made by the hook, two streamed turns, the run read back, the history; an edit branches. */
  async turns() {
    const page = new Page("page").mount();
    await page.until("the first render", idle);

    let mark = page.requests.length;
    await page.handle.submit(human("Weather in Paris?"));
    let view = await page.until("the first turn", (v) => idle(v) && v.messages.length === 4 && v.history.length > 0);
    const created = page.created.at(-1);
    const run = await page.handle.client.runs.get(view.threadId, created.run_id);
    await pause("first turn", { view, requests: page.since(mark), created, metadata: page.metadata, run });

    mark = page.requests.length;
    await page.handle.submit(human("Hello"));
    view = await page.until("the second turn", (v) => idle(v) && shows(v, "You said: Hello"));
    emit("second turn", { view, requests: page.since(mark) });

    // "Hello" edited, as a chat UI edits a message: a run from the checkpoint before the message first showed.
    const parent = page.handle.getMessagesMetadata(page.handle.messages[4], 4)?.firstSeenState?.parent_checkpoint;
    mark = page.requests.length;
    await page.handle.submit(human("Hi there"), { checkpoint: parent });
    view = await page.until("the edited turn", (v) => idle(v) && shows(v, "You said: Hi there"));
    const metadata = page.handle.getMessagesMetadata(page.handle.messages[4], 4);
    emit("edited", {
      parent,
      view,
      requests: page.since(mark),
      branch: metadata?.branch ?? null,
      branchOptions: metadata?.branchOptions ?? null,
    });

    // The branch the edit left: the hook shows it again from the history it has, asking the server nothing.
    const other = metadata.branchOptions.find((branch) => branch !== metadata.branch);
    mark = page.requests.length;
    page.handle.setBranch(other);
    view = await page.until("the other branch", (v) => v.branch === other);
    emit("other branch", { view, requests: page.since(mark) });
    page.close();
  },

  /** The thread's first message edited: a run from the checkpoint before the thread's first message. */
  async "edit-first"() {
    const page = new Page("page").mount();
    await page.until("the first render", idle);
    await page.handle.submit(human("Hello"));
    await page.until("the turn", (v) => idle(v) && shows(v, "You said: Hello") && v.history.length > 0);
    const parent =
      page.handle.getMessagesMetadata(page.handle.messages[0], 0)?.firstSeenState?.parent_checkpoint ?? null;
    const mark = page.requests.length;
    await page.handle.submit(human("Hi"), { checkpoint: parent });
    const view = await page.until("the edited turn", (v) => idle(v) && shows(v, "You said: Hi"));
    emit("edited", { parent, view, requests: page.since(mark) });
    page.close();
  },

  /** A streamed message and the same message in the values that follow: what the hook knows of where it came from. */
  async ids() {
    const page = new Page("page").mount();
    await page.until("the first render", idle);
    const client = new Client({ apiUrl: url });
    const thread = await client.threads.create();
    const parts = await readUntil(
      client.runs.stream(thread.thread_id, "agent", { input: human("Hello"), streamMode: ["messages-tuple", "values"] }),
    );
    const streamed = parts.filter((p) => p.event === "messages").map((p) => p.data[0].id);
    const final = parts.filter((p) => p.event === "values").at(-1).data.messages.map((m) => m.id);
    page.close();

    const live = new Page("live page").mount();
    await live.until("the first render", idle);
    await live.handle.submit(human("Hello"));
    const view = await live.until("the turn", (v) => idle(v) && shows(v, "You said: Hello") && v.history.length > 0);
    const answer = live.handle.messages[1];
    const metadata = live.handle.getMessagesMetadata(answer, 1);
    emit("ids", { streamed, final, view, streamMetadata: metadata?.streamMetadata ?? null });
    live.close();
  },

  /** 3: a tool that needs approval stops the turn (`__interrupt__` in values), `command.resume` approves it. */
  async approval() {
    const page = new Page("page").mount();
    await page.until("the first render", idle);
    let mark = page.requests.length;
    await page.handle.submit(human("Email Ada"));
    let view = await page.until("the question", (v) => idle(v) && v.interrupt != null);
    await pause("asked", { view, interruptsSeen: page.interruptsSeen, requests: page.since(mark) });

    const [call] = view.interrupt.value.calls;
    mark = page.requests.length;
    await page.handle.submit(undefined, { command: { resume: { [call.id]: { decision: "approve" } } } });
    view = await page.until("the approved turn", (v) => idle(v) && v.messages.length === 4);
    emit("approved", { view, requests: page.since(mark) });
    page.close();
  },

  /** 4: Stop while the tool runs; the hook reads the thread again; the next turn goes on from there. VARIANT
   * "reconnect": with reconnectOnMount, whose runs outlive their stream and whose Stop cancels the run itself. */
  async stop() {
    const reconnectOnMount = variant === "reconnect";
    const page = new Page("page", { reconnectOnMount }).mount();
    await page.until("the first render", idle);
    await page.handle.submit(human("Hello"));
    let view = await page.until("the first turn", (v) => idle(v) && shows(v, "You said: Hello") && v.history.length);
    await pause("first turn", { view });

    let mark = page.requests.length;
    const turn = page.handle.submit(human("Weather in Paris?"));
    view = await page.until("the tool call", (v) => v.isLoading && shows(v, "Weather in Paris?") && showsToolCall(v));
    const running = { view, requests: page.since(mark), created: page.created.at(-1), stored: storage.entries() };
    await pause("tool running", running);

    mark = page.requests.length;
    await page.handle.stop();
    await turn;
    view = await page.until("the thread read again after Stop", (v) => idle(v) && !shows(v, "Weather in Paris?"));
    emit("stopped", { view, requests: page.since(mark), errors: page.errors, stored: storage.entries() });
    await pause("stopped on the server?");

    await page.handle.submit(human("Hello again"));
    view = await page.until("the next turn", (v) => idle(v) && shows(v, "You said: Hello again"));
    emit("next turn", { view, errors: page.errors });
    page.close();
  },

  /** 5: a page reloaded while its run goes on rejoins the run (`reconnectOnMount`); the client resumes a stream
   * after an event it had (`Last-Event-ID`). */
  async rejoin() {
    const first = new Page("first page", { reconnectOnMount: true }).mount();
    await first.until("the first render", idle);
    first.handle.submit(human("Weather in Paris?"));
    let view = await first.until("the tool call", (v) => v.isLoading && shows(v, "Weather in Paris?") && showsToolCall(v));
    const { threadId } = view;
    const runId = first.created.at(-1).run_id;
    await pause("running", { view, requests: first.requests, created: first.created.at(-1), stored: storage.entries() });
    first.close(); // the reload: every connection of the page is dropped; sessionStorage stays

    const second = new Page("reloaded page", { threadId, reconnectOnMount: true }).mount();
    view = await second.until(
      "the rejoined run",
      (v) => second.metadata.length > 0 && v.isLoading && v.messages.length === 2 && showsToolCall(v),
    );
    emit("rejoined", { view, requests: second.requests, metadata: second.metadata });

    // The client itself: the run's stream from its start, left, and resumed after the second event.
    const client = new Client({ apiUrl: url });
    const left = new AbortController();
    const head = await readUntil(
      client.runs.joinStream(threadId, runId, { lastEventId: "-1", signal: left.signal }),
      (part) => part.event === "values",
    );
    left.abort();
    const after = head[1].id;
    const resumed = readUntil(client.runs.joinStream(threadId, runId, { lastEventId: after }));
    await pause("release the tool", { head, after });

    view = await second.until("the run's end", (v) => idle(v) && v.messages.length === 4 && v.history.length === 5);
    const rest = await resumed;
    const replay = await readUntil(client.runs.joinStream(threadId, runId, { lastEventId: "-1" }));
    emit("finished", { view, resumed: rest, replay, stored: storage.entries(), errors: second.errors });
    second.close();
  },
};

try {
  const run = scenarios[scenario];
  if (run == null) throw new Error(`no scenario ${scenario}; the scenarios are ${Object.keys(scenarios).join(", ")}`);
  await run();
  process.exit(0);
} catch (error) {
  emit("failed", { error: String(error?.stack ?? error), trace });
  process.exit(1);
}
