// The markdown subset: model HTML never becomes markup, links are filtered,
// the common constructs of model answers render.

import { describe, expect, it } from 'vitest';
import { parseMarkdown, safeHref, toHtml } from '../src/webview/markdown';

const md = (s: string): string => toHtml(parseMarkdown(s));

describe('markdown subset', () => {
  it('keeps model HTML as text', () => {
    expect(md('<img src=x onerror="alert(1)"> and <script>alert(2)</script>')).toBe(
      '<p>&lt;img src=x onerror=&quot;alert(1)&quot;&gt; and &lt;script&gt;alert(2)&lt;/script&gt;</p>',
    );
    expect(md('```html\n<b onclick=x>hi</b>\n```')).toBe(
      '<pre><code class="language-html">&lt;b onclick=x&gt;hi&lt;/b&gt;</code></pre>',
    );
    expect(md('**<i>x</i>**')).toBe('<p><strong>&lt;i&gt;x&lt;/i&gt;</strong></p>');
  });

  it('only links web and mail URLs', () => {
    expect(md('[docs](https://example.com/a?b=1&c=2)')).toBe(
      '<p><a href="https://example.com/a?b=1&amp;c=2">docs</a></p>',
    );
    expect(md('[x](javascript:alert(1))')).toBe('<p>[x](javascript:alert(1))</p>');
    expect(md('[x](data:text/html,<script>1</script>)')).not.toContain('<a');
    expect(md('[x](command:workbench.action.quit)')).not.toContain('<a');
    expect(safeHref('vscode://file/etc/passwd')).toBeUndefined();
    expect(safeHref('mailto:a@b.c')).toBe('mailto:a@b.c');
  });

  it('renders the usual constructs', () => {
    expect(md('# Title\n\nSome **bold**, *em*, `code` and ~~old~~.')).toBe(
      '<h1>Title</h1><p>Some <strong>bold</strong>, <em>em</em>, <code>code</code> and <del>old</del>.</p>',
    );
    expect(md('- one\n- two\n  - nested\n\n1. first\n2. second')).toBe(
      '<ul><li>one</li><li>two<ul><li>nested</li></ul></li></ul><ol><li>first</li><li>second</li></ol>',
    );
    expect(md('> quoted\n\n---\nline one\nline two')).toBe(
      '<blockquote><p>quoted</p></blockquote><hr><p>line one<br>line two</p>',
    );
    expect(md('snake_case_name stays, 2 * 3 * 4 too')).toBe('<p>snake_case_name stays, 2 * 3 * 4 too</p>');
    expect(md('\\*not em\\*')).toBe('<p>*not em*</p>');
  });

  it('renders an unfinished stream (open fence) without losing text', () => {
    expect(md('Here:\n```py\nprint(1)')).toBe('<p>Here:</p><pre><code class="language-py">print(1)</code></pre>');
    expect(md('an **unclosed bold')).toBe('<p>an **unclosed bold</p>');
  });
});
