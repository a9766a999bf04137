#pragma once

// The admin API (DESIGN §9): health, readiness, Prometheus metrics, limit state per subject,
// resets, reload and the effective configuration, on its own listener (`admin.listen`,
// default 127.0.0.1:9090) served by its own thread, so that a busy proxy never delays a scrape
// and an admin request never runs on a worker's event loop.
//
// Every request, to every endpoint, is first screened (DESIGN §9, admin hardening):
//   - Host must name this machine: a loopback address (127.0.0.0/8, ::1, with or without
//     port, IPv6 in brackets), `localhost`, or an entry of `admin.allowed_hosts`; otherwise 403
//     (DNS rebinding: a page whose name was made to resolve to 127.0.0.1 sends its own name).
//     No Host in HTTP/1.1, two of them, or one that is not host[:port]: 400, and the connection
//     is closed. HTTP/1.0 without Host is answered.
//   - A request with `Origin`, or with `Sec-Fetch-Site` other than `none` or `same-origin`,
//     comes from a web page: 403 (CSRF). curl, Prometheus and probes send neither; the
//     dashboard's own polls are same-origin GETs, which carry no Origin.
//
// Authentication: the token is the value of the environment variable named by
// `admin.token_env`, read once at start. Changes (every method other than GET and HEAD) always
// need `Authorization: Bearer <token>` (compared in constant time): 401 without it or with a
// wrong one, and 403 saying how to set one when no token is configured. Reads need the token
// when one is configured (401 otherwise), except /healthz and /readyz which never do; without a
// token reads are open, and the listener is then only allowed on a loopback address: start-up
// fails otherwise. /dashboard and /admin/dashboard, which browsers open, also take the token
// as the password of `Authorization: Basic` (any user name) for GET and HEAD, and their 401
// asks for it; a browser remembers Basic credentials and sends them with other sites'
// requests, so they are never taken for a change.
//
// Connections: the head of each request must arrive within `admin.header_timeout` of the
// moment the connection began to wait for it (accept, or the previous response); a body and a
// response each get 30 s. At `admin.max_connections` a new connection closes the connection
// that has been idle longest (waiting for a request, no byte of it received); when none is
// idle the new one is closed at once.
//
// Reload: `admin.allowed_hosts`, `admin.header_timeout` and `admin.max_connections` are read
// from backend.current() when a request or connection needs them, so a reload changes them;
// the listen address and the token are fixed at start.
//
// Endpoints (JSON unless said otherwise; docs/operations.md has examples):
//   GET    /healthz                       200 "ok": the process is up            (no auth)
//   GET    /readyz                        200 / 503 {"ready":...,"detail":...}    (no auth)
//   GET    /metrics                       text/plain; version=0.0.4
//   GET    /admin/limits?subject=S[&route=R]   state of each limit for S
//   DELETE /admin/limits?subject=S[&route=R]   forget S's state (one route or all)
//   POST   /admin/reset-all               forget every subject's state
//   POST   /admin/reload                  200, or 422 with the file:line error
//   GET    /admin/config                  the effective configuration, secrets redacted
//   GET    /admin/top[?n=10]              the subjects denied most in admin.top_window
//   GET    /admin/keys[?plan=P&after=SHA&limit=N]  API keys in SHA-256 order, a page at a time
//   GET    /admin/keys/{sha256}           one key: plan, name, subject, where it comes from
//   PUT    /admin/keys/{sha256}           {"plan": P, "name": N}: add or change a key at run time
//   DELETE /admin/keys/{sha256}           the key is unknown from now on (even one the
//                                         configuration declares)
//   GET    /dashboard                     text/html: the live page (dashboard_page.hpp)
//   GET    /admin/dashboard               what the page draws: per-route counts over the last
//                                         5 minutes, top subjects, upstreams, store, config
// S is api_key:<key>, user:<id>, ip:<address>, or subject:<subject> as the API prints it.

#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "ratewall/admin/metrics.hpp"
#include "ratewall/config/config.hpp"
#include "ratewall/http/key_registry.hpp"

namespace ratewall {

class gateway;

struct readiness {
  bool ready = false;
  std::string detail;  // why not, or what is up ("listening; store: memory")
};

struct reload_result {
  bool ok = false;
  std::string error;  // config_error::what(): "<file>:<line>: <key>: <message>"
};

/// What the admin API needs from the running server. Called on the admin thread, reload() on
/// a thread of the admin API's own; implementations must be safe against the worker threads
/// and a SIGHUP's reload.
class admin_backend {
 public:
  virtual ~admin_backend() = default;

  /// The configuration new requests are served with. Never null.
  virtual std::shared_ptr<const gateway> current() = 0;
  /// Re-reads, validates and swaps in the configuration file (what SIGHUP does). May block:
  /// it runs on a thread of its own, not the admin thread. A bad file keeps the running
  /// configuration.
  virtual reload_result reload() = 0;
  /// Listeners up, and the store reachable or its failure policy answering.
  virtual readiness ready() = 0;
  /// Records a run-time change to the API keys (PUT/DELETE /admin/keys) where they are kept,
  /// then applies it: "" when done, else why it could not be kept (nothing changed).
  virtual boost::asio::awaitable<std::string> change_key(key_change change) = 0;
};

struct admin_options {
  endpoint listen{"127.0.0.1", 9090};
  std::string token;      // "" = no token: only a loopback listen address is allowed
  std::string token_env;  // where the token came from, for messages
  std::string hash_key;   // keys the subject_hash shown by /admin/top (the gateway's key)
  // Why `listen` is what it is, when the configuration gave a choice (listen_without_token):
  // for the start-up log. "" otherwise.
  std::string why;

  /// admin.listen and the token read from the environment variable admin.token_env; without a
  /// token, admin.listen_without_token instead of admin.listen when it is set.
  static admin_options from_config(const admin_config& cfg, std::string hash_key);

  /// Why an admin API with these options must not start: an address other hosts can reach and
  /// no token. "" when it may. `ratewall check` asks too, so that what it passes starts.
  std::string refusal() const;
};

class admin_server {
 public:
  /// Binds the listener (port 0: any free port). Throws std::runtime_error when the address
  /// is not loopback and there is no token, std::system_error when it cannot bind. Reads
  /// backend.current() (a warning when the address is not loopback and no Host is allowed).
  admin_server(admin_options options, admin_backend& backend, metrics_registry& metrics);
  ~admin_server();
  admin_server(const admin_server&) = delete;
  admin_server& operator=(const admin_server&) = delete;

  std::uint16_t port() const;
  const admin_options& options() const;
  /// Starts the admin thread.
  void start();
  /// Closes the listener and every admin connection; joins the thread. Idempotent.
  void stop();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// The effective configuration as JSON (pretty-printed), secrets left out: API keys show
/// the first 8 hex digits of their SHA-256, a password in the Redis URL is "***", the admin
/// token never appears (only whether one is set: `token_set`).
std::string effective_config_json(const config& cfg, bool token_set);

}  // namespace ratewall
