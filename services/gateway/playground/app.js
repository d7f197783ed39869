// The playground: one page that is both the chat and the IDE, over the gateway's public
// WebSocket (/ws/{sid}) and REST endpoints. What the page saw is kept in localStorage, so a
// reload reconnects with last_event_id and nothing is lost or shown twice.
"use strict";
(function () {
  const $ = function (id) { return document.getElementById(id); };
  const store = window.localStorage;
  const page = { sid: null, socket: null, state: null, files: {}, cards: {} };

  function key() { return store.getItem("codelab.apiKey") || ""; }
  function headers() { return key() ? { Authorization: "Bearer " + key() } : {}; }
  function newId() { return "web-" + Math.random().toString(16).slice(2, 12); }
  function blankState() {
    return { lastSeq: null, transcript: [], steps: [], switches: [], chain: [], agent: "orchestrator" };
  }
  function save() {
    store.setItem("codelab.session." + page.sid, JSON.stringify(page.state));
    store.setItem("codelab.files." + page.sid, JSON.stringify(page.files));
  }

  async function api(path, options) {
    const reply = await fetch(path, Object.assign({ headers: headers() }, options || {}));
    if (reply.status === 401) {
      $("connection").textContent = "enter the API key";
      throw new Error("unauthorized");
    }
    if (!reply.ok) { throw new Error(path + ": HTTP " + reply.status); }
    return reply.json();
  }

  // ---- rendering -----------------------------------------------------------------------
  function renderTranscript() {
    const chat = $("chat");
    chat.innerHTML = "";
    page.state.transcript.forEach(function (item, index) {
      const node = document.createElement("div");
      node.className = "msg " + item.kind;
      node.dataset.index = String(index);
      if (item.kind === "assistant") {
        node.dataset.testid = "assistant";
        node.innerHTML = '<div class="who">' + window.escapeHtml(item.who || "assistant") + "</div>" + window.renderMarkdown(item.text);
      } else if (item.kind === "user" || item.kind === "reasoning") {
        node.dataset.testid = item.kind;
        node.textContent = item.text;
      } else {
        node.textContent = item.text;
      }
      chat.appendChild(node);
    });
    chat.scrollTop = chat.scrollHeight;
  }
  function renderSide() {
    $("agent").textContent = page.state.agent;
    $("switches").innerHTML = page.state.switches.map(function (s) {
      return "<li>" + window.escapeHtml(s.from + " → " + s.to + (s.reason ? " (" + s.reason + ")" : "")) + "</li>";
    }).join("");
    $("plan").innerHTML = page.state.steps.map(function (step) {
      return '<li class="' + window.escapeHtml(step.status) + '" data-step="' + window.escapeHtml(step.id) + '">' +
        window.escapeHtml(step.id + ". " + step.desc + " (" + (step.agent || "-") + ")") + "</li>";
    }).join("");
    $("chain").textContent = page.state.chain.map(function (a) {
      return ({ done: "✓", running: "●", error: "✗" }[a.status] || "·") + " " + a.agent_id;
    }).join(" → ");
  }
  function say(kind, text, extra) {
    page.state.transcript.push(Object.assign({ kind: kind, text: text }, extra || {}));
    renderTranscript();
  }
  function inspect(event) {
    const row = document.createElement("tr");
    row.innerHTML = "<td>" + (event.seq === undefined ? "" : event.seq) + "</td><td>" + window.escapeHtml(event.type || "") +
      "</td><td><pre>" + window.escapeHtml(JSON.stringify(event, null, 1)) + "</pre></td>";
    const body = $("events").querySelector("tbody");
    body.insertBefore(row, body.firstChild);
  }

  // ---- cards: what waits for the person --------------------------------------------------
  function card(id, className, html) {
    removeCard(id);
    const node = document.createElement("div");
    node.className = "card " + className;
    node.dataset.id = id;
    node.innerHTML = html;
    $("cards").appendChild(node);
    page.cards[id] = node;
    return node;
  }
  function removeCard(id) {
    if (page.cards[id]) { page.cards[id].remove(); delete page.cards[id]; }
  }
  function preview(call) {
    const args = call.arguments || {};
    if (call.tool_name === "write_file") {
      return window.diffHtml(window.lineDiff(page.files[args.path] || "", String(args.content || "")));
    }
    if (call.tool_name === "apply_patch" || call.tool_name === "apply_patch_review") {
      return window.diffHtml(window.patchLines(String(args.patch || "")));
    }
    if (call.tool_name === "execute_command" || call.tool_name === "run_command") {
      return "<pre>$ " + window.escapeHtml(String(args.command || "")) + "</pre>";
    }
    return "<pre>" + window.escapeHtml(JSON.stringify(args, null, 2)) + "</pre>";
  }
  function approvalCard(call) {
    const node = card(call.call_id, "approval",
      "<strong>" + window.escapeHtml(call.tool_name) + "</strong> needs approval: " + window.escapeHtml(call.reason || "") +
      preview(call) +
      '<textarea data-testid="edit-arguments" rows="5" hidden>' + window.escapeHtml(JSON.stringify(call.arguments || {}, null, 2)) + "</textarea>" +
      '<input data-testid="feedback" placeholder="feedback for the model (reject)">' +
      ' <button data-testid="approve">Approve</button> <button data-testid="edit">Edit</button>' +
      ' <button data-testid="send-edit" hidden>Send edited</button> <button data-testid="reject">Reject</button>');
    node.dataset.testid = "approval-card";
    const editor = node.querySelector("[data-testid=edit-arguments]");
    node.querySelector("[data-testid=approve]").onclick = function () { decide(call, "approve"); };
    node.querySelector("[data-testid=edit]").onclick = function () {
      editor.hidden = false;
      node.querySelector("[data-testid=send-edit]").hidden = false;
    };
    node.querySelector("[data-testid=send-edit]").onclick = function () {
      let edited;
      try { edited = JSON.parse(editor.value); } catch (error) { editor.setCustomValidity("not JSON"); editor.reportValidity(); return; }
      decide(call, "edit", { modified_arguments: edited });
    };
    node.querySelector("[data-testid=reject]").onclick = function () {
      decide(call, "reject", { feedback: node.querySelector("[data-testid=feedback]").value });
    };
  }
  // apply_patch_review: the person's answer is the approval; the page writes nothing.
  function reviewCard(call) {
    const args = call.arguments || {};
    const node = card(call.call_id, "review",
      "<strong>Patch review</strong> " + window.escapeHtml(args.description || "") +
      ' <span class="muted">nothing is written: the model applies what you keep</span>' + preview(call) +
      '<textarea data-testid="review-patch" rows="6" hidden>' + window.escapeHtml(String(args.patch || "")) + "</textarea>" +
      '<input data-testid="review-feedback" placeholder="feedback for the model (reject)">' +
      ' <button data-testid="review-keep">Keep</button> <button data-testid="review-edit">Edit</button>' +
      ' <button data-testid="review-reject">Reject</button>');
    node.dataset.testid = "review-card";
    const patch = node.querySelector("[data-testid=review-patch]");
    node.querySelector("[data-testid=review-edit]").onclick = function () { patch.hidden = false; };
    node.querySelector("[data-testid=review-keep]").onclick = function () { answer(call, { patch: patch.value }); };
    node.querySelector("[data-testid=review-reject]").onclick = function () {
      const feedback = node.querySelector("[data-testid=review-feedback]").value;
      answer(call, { accepted: false, feedback: feedback || "rejected in the review" });
    };
  }
  // A call the page runs: a review, or a tool answered by hand (or simulated).
  function ideCard(call) {
    if (call.tool_name === "apply_patch_review") { reviewCard(call); } else { toolCard(call); }
  }
  function decide(call, decision, extra) {
    send(Object.assign({ type: "hitl_decision", call_id: call.call_id, decision: decision }, extra || {}));
    removeCard(call.call_id);
  }
  function toolCard(call) {
    const node = card(call.call_id, "tool",
      "<strong>" + window.escapeHtml(call.tool_name) + "</strong> for the IDE" +
      "<pre>" + window.escapeHtml(JSON.stringify(call.arguments || {}, null, 2)) + "</pre>" +
      '<textarea data-testid="tool-result" rows="3" placeholder="the result (JSON or text)"></textarea>' +
      ' <button data-testid="send-result">Send result</button> <button data-testid="send-error">Send as error</button>' +
      ' <button data-testid="simulate">Simulate</button>');
    node.dataset.testid = "tool-card";
    const box = node.querySelector("[data-testid=tool-result]");
    node.querySelector("[data-testid=send-result]").onclick = function () { answer(call, parseLoose(box.value)); };
    node.querySelector("[data-testid=send-error]").onclick = function () { answer(call, undefined, box.value || "failed"); };
    node.querySelector("[data-testid=simulate]").onclick = function () {
      const outcome = simulate(call);
      answer(call, outcome.result, outcome.error);
    };
  }
  function parseLoose(text) { try { return JSON.parse(text); } catch (error) { return text; } }
  function answer(call, result, error) {
    const message = { type: "tool_result", call_id: call.call_id };
    if (call.plan_id) { message.plan_id = call.plan_id; message.step_id = call.step_id; }
    if (error !== undefined) { message.error = error; } else { message.result = result; }
    send(message);
    removeCard(call.call_id);
    save();
  }
  // The page's own small workspace: writes land in it, reads come from it.
  function simulate(call) {
    const args = call.arguments || {};
    switch (call.tool_name) {
      case "write_file":
        page.files[args.path] = String(args.content || "");
        return { result: { path: args.path, bytes_written: page.files[args.path].length } };
      case "read_file":
        return args.path in page.files ? { result: page.files[args.path] }
          : { error: args.path + ": no such file in the playground's workspace" };
      case "list_files":
        return { result: Object.keys(page.files).sort() };
      case "execute_command": case "run_command":
        return { result: { exit_code: 0, stdout: "(simulated) " + args.command, stderr: "" } };
      default:
        return { result: { simulated: true } };
    }
  }
  function planCard(request) {
    const id = request.approval_request_id;
    const plan = request.plan_summary || {};
    const node = card(id, "plan",
      "<strong>Plan:</strong> " + window.escapeHtml(plan.goal || "") + " (" + (plan.subtasks_count || 0) + " steps" +
      (plan.total_estimated_time ? ", " + window.escapeHtml(plan.total_estimated_time) : "") + ")" +
      ' <input data-testid="plan-feedback" placeholder="feedback (modify / reject)">' +
      ' <button data-testid="plan-approve">Approve</button> <button data-testid="plan-modify">Modify</button>' +
      ' <button data-testid="plan-reject">Reject</button>');
    node.dataset.testid = "plan-card";
    ["approve", "modify", "reject"].forEach(function (decision) {
      node.querySelector("[data-testid=plan-" + decision + "]").onclick = function () {
        const feedback = node.querySelector("[data-testid=plan-feedback]").value;
        send({ type: "plan_decision", approval_request_id: id, decision: decision, feedback: feedback || undefined });
        removeCard(id);
      };
    });
  }

  // ---- events ---------------------------------------------------------------------------
  // A streamed token joins the message it belongs to, or starts it.
  function appendToken(last, kind, event, extra) {
    const token = event.token || "";
    if (last && last.kind === kind && last.messageId === event.message_id) { last.text += token; }
    else { page.state.transcript.push(Object.assign({ kind: kind, text: token, messageId: event.message_id }, extra)); }
    renderTranscript();
  }
  function handle(event) {
    inspect(event);
    if (typeof event.seq === "number") {
      if (page.state.lastSeq !== null && event.seq <= page.state.lastSeq) { return; }
      page.state.lastSeq = event.seq;
    }
    const last = page.state.transcript[page.state.transcript.length - 1];
    switch (event.type) {
      case "assistant_message":
        if (event.token) {
          appendToken(last, "assistant", event, { who: event.agent });
        } else if (event.content) {
          say("assistant", event.content, { who: event.agent, messageId: event.message_id });
        }
        break;
      case "reasoning":
        appendToken(last, "reasoning", event, {});
        break;
      case "agent_switched":
        page.state.agent = event.to_agent;
        page.state.switches.push({ from: event.from_agent, to: event.to_agent, reason: event.reason });
        break;
      case "tool_call":
        if (event.requires_approval) { approvalCard(event); } else { ideCard(event); }
        break;
      case "plan_approval_required": planCard(event); break;
      case "plan_update": page.state.steps = event.steps || []; break;
      case "plan_progress":
        page.state.steps.forEach(function (step) { if (step.id === event.step_id) { step.status = event.status; } });
        break;
      case "agent_chain_update": page.state.chain = event.agents || []; break;
      case "plan_rejected": say("note", "plan rejected: " + (event.feedback || "")); break;
      case "error": say("error", (event.error_code || "ERROR") + ": " + (event.content || "")); break;
      case "done":
        $("connection").textContent = event.status === "completed" ? "idle" : event.status;
        $("connection").dataset.status = event.status;
        refreshUsage();
        refreshSessions();
        break;
    }
    renderSide();
    save();
  }

  function send(message) {
    const socket = page.socket;
    if (socket && socket.readyState === WebSocket.OPEN) { socket.send(JSON.stringify(message)); }
    else if (socket && socket.readyState === WebSocket.CONNECTING) {
      socket.addEventListener("open", function () { socket.send(JSON.stringify(message)); });
    } else { say("error", "not connected: the message was not sent"); }
  }
  function disconnect() {
    const old = page.socket;
    page.socket = null;
    if (old) { old.close(); }
  }
  function connect() {
    disconnect();
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const query = new URLSearchParams();
    if (page.state.lastSeq !== null) { query.set("last_event_id", String(page.state.lastSeq)); }
    // The key travels as a subprotocol, never in the URL (the gateway answers "codelab").
    const protocols = key() ? ["codelab", "bearer." + key()] : [];
    const socket = new WebSocket(scheme + location.host + "/ws/" + encodeURIComponent(page.sid) + "?" + query, protocols);
    page.socket = socket;
    socket.onopen = function () { $("connection").textContent = "connected"; };
    socket.onmessage = function (frame) { handle(JSON.parse(frame.data)); };
    socket.onclose = function () {
      if (page.socket !== socket) { return; }
      $("connection").textContent = "reconnecting…";
      // A refused key is not a network failure: ask for the key instead of retrying.
      api("/sessions").then(function () {
        setTimeout(function () { if (page.socket === socket) { connect(); } }, 500);
      }, function () { if (page.socket === socket) { $("connection").textContent = "enter the API key"; } });
    };
  }

  async function refreshUsage() {
    try {
      const usage = await api("/events/metrics/session/" + encodeURIComponent(page.sid));
      $("usage").innerHTML = ["total_requests", "prompt_tokens", "completion_tokens", "total_tokens", "average_duration_ms"]
        .map(function (name) { return "<dt>" + name.replace(/_/g, " ") + '</dt><dd data-usage="' + name + '">' + Math.round(usage[name] || 0) + "</dd>"; })
        .join("");
    } catch (error) { $("usage").textContent = "no usage yet"; }
  }
  async function refreshSessions() {
    try {
      const body = await api("/sessions");
      $("sessions").innerHTML = "";
      body.sessions.forEach(function (item) {
        const li = document.createElement("li");
        li.textContent = item.title || item.session_id;
        li.title = item.session_id + " · " + item.message_count + " messages";
        li.dataset.session = item.session_id;
        if (item.session_id === page.sid) { li.className = "current"; }
        li.onclick = function () { open(item.session_id); };
        $("sessions").appendChild(li);
      });
    } catch (error) { $("sessions").textContent = String(error.message); }
  }
  // What waited while no page was attached: approvals, plans, and calls sent to the IDE.
  async function recover() {
    const sid = encodeURIComponent(page.sid);
    try {
      const pending = await api("/sessions/" + sid + "/pending-approvals");
      pending.pending_approvals.forEach(function (item) {
        if (item.type === "plan_approval") { planCard(item); }
        else { approvalCard(Object.assign({ requires_approval: true }, item)); }
      });
      const records = await api("/sessions/" + sid + "/records");
      records.records.executions.forEach(function (run) {
        if (run.state === "dispatched") {
          ideCard({ call_id: run.execution_id, tool_name: run.tool_name, arguments: run.arguments, plan_id: run.plan_id, step_id: run.step_id });
        }
      });
    } catch (error) { /* a session nobody has used yet has nothing waiting */ }
  }
  async function loadHistory() {
    try {
      const body = await api("/sessions/" + encodeURIComponent(page.sid) + "/history");
      body.messages.forEach(function (m) {
        if ((m.role === "user" || m.role === "assistant") && m.content) { say(m.role, m.content); }
      });
    } catch (error) { /* a new session has no history */ }
  }

  async function open(sid) {
    disconnect();
    page.sid = sid;
    location.hash = "session=" + encodeURIComponent(sid);
    store.setItem("codelab.lastSession", sid);
    $("session-title").textContent = "session " + sid;
    Object.keys(page.cards).forEach(removeCard);
    $("events").querySelector("tbody").innerHTML = "";
    const saved = store.getItem("codelab.session." + sid);
    page.state = saved ? JSON.parse(saved) : blankState();
    page.files = JSON.parse(store.getItem("codelab.files." + sid) || "{}");
    renderTranscript();
    renderSide();
    if (!saved) { await loadHistory(); }
    connect();
    await recover();
    refreshUsage();
    refreshSessions();
  }

  $("composer").onsubmit = function (submit) {
    submit.preventDefault();
    const text = $("message").value.trim();
    if (!text) { return; }
    const message = { type: "user_message", content: text, role: "user" };
    if ($("agent-choice").value) { message.agent_type = $("agent-choice").value; }
    say("user", text);
    save();
    send(message);
    $("message").value = "";
  };
  $("message").onkeydown = function (key) {
    if (key.key === "Enter" && !key.shiftKey) { key.preventDefault(); $("composer").requestSubmit(); }
  };
  $("cancel").onclick = function () { send({ type: "cancel" }); };
  $("new-session").onclick = function () { open(newId()); };
  $("api-key").value = key();
  $("api-key").onchange = function () {
    if ($("api-key").value.trim() === key()) { return; }
    store.setItem("codelab.apiKey", $("api-key").value.trim());
    open(page.sid);
  };

  const fromHash = /session=([^&]+)/.exec(location.hash);
  open(fromHash ? decodeURIComponent(fromHash[1]) : newId());
})();
