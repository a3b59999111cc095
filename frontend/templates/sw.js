// Temper's service worker: keeps the site's large static scripts (plotly.js, about 4.8 MB) in
// the browser's Cache Storage from the first page a user opens (the sign-in page), and answers
// requests for them from there. Chromium compiles a script that a service worker caches while it
// installs and keeps the compiled code with it, so the first run page a user opens runs plotly
// from compiled code instead of parsing and compiling it then (docs/browser.md, "Measured").
// Every other request goes to the network untouched.
"use strict";

const CACHE = {{ cache_name_json|safe }};
const PRECACHE = {{ precache_json|safe }};

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(CACHE).then((cache) => cache.addAll(PRECACHE)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  event.waitUntil(caches.keys()
    .then((names) => Promise.all(names.filter((n) => n.startsWith("temper-") && n !== CACHE).map((n) => caches.delete(n))))
    .then(() => self.clients.claim()));
});

self.addEventListener("fetch", (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== "GET" || url.origin !== self.location.origin || !PRECACHE.includes(url.pathname)) return;
  event.respondWith(caches.open(CACHE).then((cache) => cache.match(event.request, { ignoreSearch: true })
    .then((hit) => hit || fetch(event.request))));
});
