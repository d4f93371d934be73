// The UI's state: what is selected, shown and running, and the page's
// elements by role. Every module reads and changes this one object; views
// redraw from it.

import { $ } from './dom.js';

export const state = {
  conversations: [],
  conv: null,        // the selected conversation (null: a new one, not created yet)
  focus: '',         // the sandbox shown in the panel; code cells run there
  sandbox: null,     // the focused sandbox as last fetched
  pending: [],       // files for the next question: {file, status, uploaded, error, el, promise}
  mode: 'chat',
  streaming: new Set(), // conversation ids (or '' for a new one) with a question in flight
  codeBusy: false,
  actionBusy: false,
  threads: new Map(), // conversation id ('' for new) → its chat thread element
  cells: new Map(),   // conversation id ('' for new) → its code cells element
  cellHistory: [],
  historyAt: -1,
  running: null,      // the code cell running now: {view, sandbox, contextId}
  chatAborts: new Map(), // conversation id ('' for new) → aborts its answer being streamed
  chatOff: '',        // why chat is unavailable ('' when it is, or not known)
  filesPath: '/workspace',
  filesOf: '',        // the sandbox the file list shows
};

export const el = {
  sidebar: $('sidebar'), panel: $('panel'), backdrop: $('backdrop'),
  convList: $('conversation-list'), convEmpty: $('conversation-empty'),
  title: $('conversation-title'), sub: $('conversation-sub'),
  banners: $('banners'), toasts: $('toasts'),
  chatView: $('chat-view'), codeView: $('code-view'),
  tabChat: $('tab-chat'), tabCode: $('tab-code'),
  messages: $('messages'), chatEmpty: $('chat-empty'), chatScroller: $('chat-scroller'),
  cells: $('cells'), codeEmpty: $('code-empty'), codeScroller: $('code-scroller'),
  composer: $('composer'), question: $('question'), send: $('send-button'),
  attach: $('attach-button'), fileInput: $('file-input'), attachments: $('attachments'),
  drop: $('drop-overlay'),
  codeForm: $('code-form'), codeInput: $('code-input'), run: $('run-button'), codeTarget: $('code-target'),
  sbNone: $('sandbox-none'), sbInfo: $('sandbox-info'), sbName: $('sandbox-name'), sbId: $('sandbox-id'),
  sbState: $('sandbox-state'), sbFacts: $('sandbox-facts'), focusNote: $('focus-note'),
  sbPorts: $('sandbox-ports'), sbPortList: $('sandbox-port-list'),
  actions: $('sandbox-actions'), graph: $('graph'), panelDot: $('toggle-panel-dot'),
  filesCard: $('files-card'), fileList: $('file-list'), filesPath: $('files-path'), filePreview: $('file-preview'),
  filesInput: $('files-input'), stopAnswer: $('stop-answer'), chatOff: $('chat-off'),
  forkDialog: $('fork-dialog'), forkCount: $('fork-count'), forkNames: $('fork-names'),
  restoreDialog: $('restore-dialog'), lightbox: $('lightbox'),
  keyDialog: $('key-dialog'), keyInput: $('key-input'),
};

export const convKey = () => (state.conv ? state.conv.id : '');
export const homeSandbox = () => (state.conv ? state.conv.sandbox : '');
