// A small markdown subset for model answers, rendered without ever parsing
// model text as HTML: the parser produces a tree of known elements whose text
// is only ever set through textContent (toDom) or escaped (toHtml, used by
// the tests). Links are kept only for http(s) and mailto.
//
// Supported: fenced code, headings, paragraphs (newlines kept), lists
// (nested by indentation), block quotes, rules, `code`, **strong**, *em*,
// ~~del~~, [links](https://...). Anything else stays literal text.

export type MdTag =
  | 'p'
  | 'h1'
  | 'h2'
  | 'h3'
  | 'h4'
  | 'h5'
  | 'h6'
  | 'ul'
  | 'ol'
  | 'li'
  | 'pre'
  | 'code'
  | 'strong'
  | 'em'
  | 'del'
  | 'a'
  | 'blockquote'
  | 'hr'
  | 'br';

export type MdNode = { t: 'text'; v: string } | { t: 'el'; tag: MdTag; children: MdNode[]; href?: string; lang?: string };

const text = (v: string): MdNode => ({ t: 'text', v });
const el = (tag: MdTag, children: MdNode[] = [], extra: { href?: string; lang?: string } = {}): MdNode => ({
  t: 'el',
  tag,
  children,
  ...extra,
});

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)\s*$/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( *)([-*+]|\d{1,9}[.)])\s+(.*)$/;

export function parseMarkdown(src: string): MdNode[] {
  return parseBlocks(src.replace(/\r\n?/g, '\n').split('\n'));
}

function parseBlocks(lines: string[]): MdNode[] {
  const out: MdNode[] = [];
  let para: string[] = [];
  const flush = (): void => {
    if (para.length) out.push(el('p', inlineWithBreaks(para)));
    para = [];
  };
  for (let i = 0; i < lines.length; ) {
    const line = lines[i];
    let m: RegExpExecArray | null;
    if ((m = FENCE.exec(line))) {
      flush();
      const fence = m[1];
      const body: string[] = [];
      i++;
      // An unclosed fence (still streaming) runs to the end.
      while (i < lines.length && !new RegExp(`^ {0,3}${fence[0]}{${fence.length},}\\s*$`).test(lines[i])) body.push(lines[i++]);
      i++;
      out.push(el('pre', [el('code', [text(body.join('\n'))], m[2] ? { lang: m[2] } : {})]));
      continue;
    }
    if (line.trim() === '') {
      flush();
      i++;
      continue;
    }
    if ((m = HEADING.exec(line))) {
      flush();
      out.push(el(`h${m[1].length}` as MdTag, parseInline(m[2])));
      i++;
      continue;
    }
    if (RULE.test(line)) {
      flush();
      out.push(el('hr'));
      i++;
      continue;
    }
    if (QUOTE.test(line)) {
      flush();
      const body: string[] = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
        body.push(m[1]);
        i++;
      }
      out.push(el('blockquote', parseBlocks(body)));
      continue;
    }
    if ((m = ITEM.exec(line))) {
      flush();
      i = parseList(lines, i, out);
      continue;
    }
    para.push(line.trim());
    i++;
  }
  flush();
  return out;
}

function parseList(lines: string[], start: number, out: MdNode[]): number {
  const first = ITEM.exec(lines[start])!;
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const items: MdNode[] = [];
  let i = start;
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || m[1].length !== indent || /\d/.test(m[2]) !== ordered) break;
    const body = [m[3]];
    const contentIndent = indent + m[2].length + 1;
    i++;
    // Continuation: indented lines (nested lists included) and lazy paragraph lines.
    while (i < lines.length) {
      const l = lines[i];
      if (l.trim() === '') {
        const next = lines[i + 1];
        if (next !== undefined && next.length - next.trimStart().length >= contentIndent && next.trim() !== '') {
          body.push('');
          i++;
          continue;
        }
        break;
      }
      const lead = l.length - l.trimStart().length;
      if (lead > indent) {
        body.push(l.slice(Math.min(lead, contentIndent)));
        i++;
        continue;
      }
      if (ITEM.test(l) || FENCE.test(l) || HEADING.test(l) || QUOTE.test(l) || RULE.test(l)) break;
      body.push(l.trim());
      i++;
    }
    const blocks = parseBlocks(body);
    // A tight item is shown without a paragraph margin.
    const children =
      blocks.length >= 1 && blocks[0].t === 'el' && blocks[0].tag === 'p' ? [...blocks[0].children, ...blocks.slice(1)] : blocks;
    items.push(el('li', children));
  }
  out.push(el(ordered ? 'ol' : 'ul', items));
  return i;
}

function inlineWithBreaks(lines: string[]): MdNode[] {
  const out: MdNode[] = [];
  lines.forEach((l, idx) => {
    if (idx) out.push(el('br'));
    out.push(...parseInline(l));
  });
  return out;
}

const ESCAPABLE = /[\\`*_{}[\]()#+\-.!~>|]/;

export function parseInline(s: string): MdNode[] {
  const out: MdNode[] = [];
  let buf = '';
  const flush = (): void => {
    if (buf) out.push(text(buf));
    buf = '';
  };
  let i = 0;
  while (i < s.length) {
    const c = s[i];
    const rest = s.slice(i);
    if (c === '\\' && i + 1 < s.length && ESCAPABLE.test(s[i + 1])) {
      buf += s[i + 1];
      i += 2;
      continue;
    }
    if (c === '`') {
      const m = /^(`+)(?!`)([\s\S]*?[^`])\1(?!`)/.exec(rest);
      if (m) {
        flush();
        out.push(el('code', [text(m[2].replace(/^ (.*) $/, '$1'))]));
        i += m[0].length;
        continue;
      }
    }
    if ((rest.startsWith('**') || rest.startsWith('__') || rest.startsWith('~~')) && rest.length > 4) {
      const d = rest.slice(0, 2);
      const j = s.indexOf(d, i + 2);
      if (j > i + 2 && s[i + 2] !== ' ' && s[j - 1] !== ' ') {
        flush();
        out.push(el(d === '~~' ? 'del' : 'strong', parseInline(s.slice(i + 2, j))));
        i = j + 2;
        continue;
      }
    }
    if ((c === '*' || c === '_') && s[i + 1] !== c && s[i + 1] !== ' ' && s[i + 1] !== undefined) {
      // `_` inside words (snake_case) is not emphasis.
      const wordBefore = c === '_' && /\w/.test(s[i - 1] ?? '');
      let j = s.indexOf(c, i + 1);
      while (j > 0 && c === '_' && /\w/.test(s[j + 1] ?? '')) j = s.indexOf(c, j + 1);
      if (!wordBefore && j > i + 1 && s[j - 1] !== ' ' && s[j + 1] !== c) {
        flush();
        out.push(el('em', parseInline(s.slice(i + 1, j))));
        i = j + 1;
        continue;
      }
    }
    if (c === '[') {
      const m = /^\[([^\]\n]*)\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/.exec(rest);
      if (m) {
        const href = safeHref(m[2]);
        if (href) {
          flush();
          out.push(el('a', parseInline(m[1] || href), { href }));
          i += m[0].length;
          continue;
        }
      }
    }
    buf += c;
    i++;
  }
  flush();
  return out;
}

/** Only web and mail links; `javascript:`, `data:`, `vscode:`, `command:` and relative URLs stay text. */
export function safeHref(raw: string): string | undefined {
  try {
    const u = new URL(raw);
    if (u.protocol === 'http:' || u.protocol === 'https:' || u.protocol === 'mailto:') return u.href;
  } catch {
    /* not an absolute URL */
  }
  return undefined;
}

const HTML_ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => HTML_ESCAPES[c]);
}

/** Serialise to HTML with every text and attribute escaped (tests, and any string consumer). */
export function toHtml(nodes: MdNode[]): string {
  return nodes
    .map((n) => {
      if (n.t === 'text') return escapeHtml(n.v);
      if (n.tag === 'br' || n.tag === 'hr') return `<${n.tag}>`;
      const attrs =
        (n.href ? ` href="${escapeHtml(n.href)}"` : '') + (n.lang ? ` class="language-${escapeHtml(n.lang)}"` : '');
      return `<${n.tag}${attrs}>${toHtml(n.children)}</${n.tag}>`;
    })
    .join('');
}

/** Build DOM nodes; text only ever goes through createTextNode. */
export function toDom(doc: Document, nodes: MdNode[], parent: Node): void {
  for (const n of nodes) {
    if (n.t === 'text') {
      parent.appendChild(doc.createTextNode(n.v));
      continue;
    }
    const e = doc.createElement(n.tag);
    if (n.href) {
      e.setAttribute('href', n.href);
      e.setAttribute('title', n.href);
    }
    if (n.lang) e.className = `language-${n.lang.replace(/[^\w+#.-]/g, '')}`;
    toDom(doc, n.children, e);
    parent.appendChild(e);
  }
}
