// The prompt box's helpers: slash-command completion (the daemon's
// agent/listCommands) and images (pasted or attached), each offered only when
// the daemon has it.

import { IMAGE_TYPES, type PromptImage } from '../common/messages';
import type { SlashCommand } from '../protocol/types';
import { $, button, h } from './dom';

const promptBox = $<HTMLTextAreaElement>('prompt');
const list = $<HTMLUListElement>('commands');
const attachments = $<HTMLElement>('attachments');
const attachBtn = $<HTMLButtonElement>('btn-attach');
const fileInput = $<HTMLInputElement>('file-input');

let commands: SlashCommand[] = [];
let matches: SlashCommand[] = [];
let selected = 0;
let imagesAllowed = false;
let images: PromptImage[] = [];
/** Notices (too big, wrong type) go through the chat's notice area. */
let warn: (text: string) => void = () => {};

/** Anthropic's per-image limit, which agentd applies too (limits.maxImageBytes). */
const MAX_IMAGE_BYTES = 5 * 1024 * 1024;

export function setFeatures(cmds: SlashCommand[], images: boolean, onWarning: (text: string) => void): void {
  commands = cmds.filter((c) => c && typeof c.name === 'string').map((c) => ({ ...c, name: c.name.replace(/^\//, '') }));
  imagesAllowed = images;
  warn = onWarning;
  attachBtn.hidden = !images;
  if (!images) clearImages();
  updateCommands();
}

// --- slash commands -------------------------------------------------------------

/** The word being typed when the prompt is "/wor" (nothing after it yet). */
function typedCommand(): string | undefined {
  const m = /^\/([\w-]*)$/.exec(promptBox.value);
  return m ? m[1] : undefined;
}

function updateCommands(): void {
  const word = typedCommand();
  matches = word === undefined ? [] : commands.filter((c) => c.name.startsWith(word));
  list.textContent = '';
  list.hidden = matches.length === 0;
  selected = Math.min(selected, Math.max(matches.length - 1, 0));
  matches.forEach((c, i) => {
    const li = h(
      'li',
      { data: { command: c.name }, title: c.description },
      h('span', { class: 'cmd-name', text: `/${c.name}${c.hint ? ` ${c.hint}` : ''}` }),
      h('span', { class: 'cmd-desc', text: c.description }),
    );
    li.setAttribute('role', 'option');
    li.setAttribute('aria-selected', String(i === selected));
    li.addEventListener('mousedown', (ev) => {
      ev.preventDefault(); // keep the focus in the prompt box
      complete(c);
    });
    list.append(li);
  });
}

function complete(c: SlashCommand): void {
  promptBox.value = `/${c.name} `;
  promptBox.setSelectionRange(promptBox.value.length, promptBox.value.length);
  promptBox.focus();
  updateCommands();
}

/**
 * Keys while the list is open: arrows move, Tab and Enter complete, Escape
 * closes. Returns true when the key was used (the chat must not send then).
 */
export function commandKey(ev: KeyboardEvent): boolean {
  if (list.hidden || matches.length === 0) return false;
  switch (ev.key) {
    case 'ArrowDown':
    case 'ArrowUp':
      selected = (selected + (ev.key === 'ArrowDown' ? 1 : matches.length - 1)) % matches.length;
      updateCommands();
      return true;
    case 'Tab':
    case 'Enter': {
      const c = matches[selected];
      // "/reset" typed in full: Enter sends it rather than completing it again.
      if (ev.key === 'Enter' && (ev.shiftKey || typedCommand() === c.name)) return false;
      complete(c);
      return true;
    }
    case 'Escape':
      list.hidden = true;
      matches = [];
      return true;
  }
  return false;
}

promptBox.addEventListener('input', updateCommands);
promptBox.addEventListener('blur', () => {
  list.hidden = true;
});
promptBox.addEventListener('focus', updateCommands);

// --- images ------------------------------------------------------------------------

export function takeImages(): PromptImage[] {
  const out = images;
  clearImages();
  return out;
}

function clearImages(): void {
  images = [];
  renderAttachments();
}

function renderAttachments(): void {
  attachments.textContent = '';
  attachments.hidden = images.length === 0;
  images.forEach((img, i) => {
    const el = document.createElement('img');
    el.className = 'thumb';
    el.alt = `image ${i + 1}`;
    el.src = `data:${img.mimeType};base64,${img.data}`;
    const remove = button(
      '×',
      () => {
        images.splice(i, 1);
        renderAttachments();
      },
      { class: 'icon', title: 'Remove this image' },
    );
    attachments.append(h('div', { class: 'attachment', data: { mimeType: img.mimeType } }, el, remove));
  });
}

async function addFile(file: File): Promise<void> {
  if (!(IMAGE_TYPES as readonly string[]).includes(file.type)) {
    warn(`Not attached: ${file.name || 'the file'} is ${file.type || 'not an image'}; agentd takes PNG, JPEG, GIF and WebP images.`);
    return;
  }
  if (file.size > MAX_IMAGE_BYTES) {
    warn(`Not attached: ${file.name || 'the image'} is ${(file.size / 1048576).toFixed(1)} MB; the limit is 5 MB.`);
    return;
  }
  const url = await new Promise<string>((resolve, reject) => {
    const r = new FileReader();
    r.onload = () => resolve(String(r.result));
    r.onerror = () => reject(r.error);
    r.readAsDataURL(file);
  });
  images.push({ mimeType: file.type, data: url.slice(url.indexOf(',') + 1) });
  renderAttachments();
}

promptBox.addEventListener('paste', (ev) => {
  if (!imagesAllowed) return;
  const files = [...(ev.clipboardData?.files ?? [])].filter((f) => f.type.startsWith('image/'));
  if (!files.length) return;
  ev.preventDefault();
  for (const f of files) void addFile(f);
});

attachBtn.addEventListener('click', () => fileInput.click());
fileInput.addEventListener('change', () => {
  for (const f of fileInput.files ?? []) void addFile(f);
  fileInput.value = '';
});
