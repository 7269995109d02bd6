// The chat webview's HTML shell. Strict CSP: no inline script or style, only
// the bundled script carrying this load's nonce and the extension's own CSS.

export interface ChatHtmlOptions {
  /** webview.cspSource (the origin VS Code serves extension resources from). */
  cspSource: string;
  nonce: string;
  scriptUri: string;
  styleUri: string;
}

export function makeNonce(): string {
  const chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  let out = '';
  // Math.random is enough for a CSP nonce: it only has to be unguessable by
  // content that cannot read the page, and model text never runs as script.
  for (let i = 0; i < 32; i++) out += chars[Math.floor(Math.random() * chars.length)];
  return out;
}

const attr = (s: string): string => s.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;');

export function chatHtml(o: ChatHtmlOptions): string {
  const csp = [
    "default-src 'none'",
    `style-src ${o.cspSource}`,
    `script-src 'nonce-${o.nonce}'`,
    `img-src ${o.cspSource} data:`,
    `font-src ${o.cspSource}`,
    "connect-src 'none'",
    "form-action 'none'",
    "base-uri 'none'",
  ].join('; ');
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${attr(csp)}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link rel="stylesheet" href="${attr(o.styleUri)}">
<title>agentd</title>
</head>
<body>
<div id="app">
  <header id="status-bar">
    <span id="daemon-state" class="pill status-item" data-state="starting">starting…</span>
    <select id="mode" class="status-item" aria-label="Mode" title="Mode: what the agent may do without asking" hidden></select>
    <select id="model" class="status-item" aria-label="Model" title="Model" hidden></select>
    <span id="context-meter" class="pill status-item" hidden></span>
  </header>
  <details id="memory">
    <summary>Memory <span id="memory-count"></span></summary>
    <div id="memory-body"><p class="muted">Loading…</p></div>
  </details>
  <details id="mcp" hidden>
    <summary>MCP servers <span id="mcp-count"></span></summary>
    <div id="mcp-body"></div>
  </details>
  <details id="plan" open hidden>
    <summary>Plan <span id="plan-count"></span></summary>
    <ol id="plan-body"></ol>
  </details>
  <main id="transcript" aria-live="polite"></main>
  <div id="notices" role="status"></div>
  <form id="composer">
    <ul id="commands" role="listbox" aria-label="Commands" hidden></ul>
    <div id="attachments" hidden></div>
    <textarea id="prompt" rows="3" placeholder="Ask agentd… (Enter to send, Shift+Enter for a new line)" aria-label="Prompt"></textarea>
    <div class="composer-actions">
      <span id="run-state" class="muted"></span>
      <input type="file" id="file-input" accept="image/png,image/jpeg,image/gif,image/webp" multiple hidden>
      <button type="button" id="btn-attach" class="secondary" title="Attach an image (or paste one into the prompt)" hidden>Image…</button>
      <button type="button" id="btn-stop" title="Stop (Ctrl+Shift+Escape)" disabled>Stop</button>
      <button type="submit" id="btn-send">Send</button>
    </div>
  </form>
</div>
<script nonce="${attr(o.nonce)}" src="${attr(o.scriptUri)}"></script>
</body>
</html>`;
}
