// The tutti SDK's example app (examples/sdk-app/README.md tells how to run it).
// Link: index.html#server=http://127.0.0.1:8080&room=demo&token=…&name=ada
import { Room } from './tutti.js';

const link = new URLSearchParams(location.hash.slice(1));
const server = link.get('server') || 'http://127.0.0.1:8080';
const roomId = link.get('room') || 'demo';
const $ = (id) => document.getElementById(id);
$('server').textContent = server;
$('room').textContent = roomId;

let room = null;

function showError(err) {
  // What went wrong, on the page: the code and the server's (or the SDK's) words.
  $('error').textContent = `${err && err.code ? err.code : 'error'}: ${err && err.message ? err.message : err}`;
  $('error').hidden = false;
}

function render() {
  $('people').replaceChildren(
    ...room.participants.map((p) => {
      const li = document.createElement('li');
      li.textContent = `${p.name || p.identity || p.id}${p.you ? ' (you)' : ''}${p.talking ? ' (talking)' : ''}${p.muted ? ' (muted)' : ''}`;
      return li;
    }),
  );
}

$('join').addEventListener('click', async () => {
  $('error').hidden = true;
  $('join').disabled = true;
  $('status').textContent = 'Joining…';
  room = new Room({ url: server, room: roomId, token: link.get('token') || undefined, name: link.get('name') || 'ada' });
  room.on('track', (stream) => { document.querySelector('audio').srcObject = stream; });
  room.on('change', render);
  room.on('ended', (err) => {
    $('status').textContent = 'The call ended.';
    $('join').disabled = false;
    $('join').hidden = false;
    $('leave').hidden = true;
    if (err) showError(err);
  });
  try {
    await room.join();
    $('status').textContent = 'In the call.';
    $('join').hidden = true;
    $('leave').hidden = false;
  } catch (err) {
    $('status').textContent = 'Not in the call.';
    $('join').disabled = false;
    showError(err);
  }
  Object.assign(window, { room }); // in the console: room.setMuted(true), room.setHand(true)
});

$('leave').addEventListener('click', () => room && room.leave());
