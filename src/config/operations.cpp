// The operational sections: `log:`, `headers:` (top level and per route) and `routes[].deny`.

#include "ratewall/core/parse.hpp"
#include "sections.hpp"

namespace ratewall {

namespace {

// A custom denial body is sent from memory on every 429; beyond this it is surely a mistake
// (a file pasted in), and a large body is a cheap amplification for a denied client.
constexpr std::size_t k_max_deny_body = 64 * 1024;

// "type/subtype" with optional "; name=value" parameters: what a Content-Type holds. Checked so
// that nothing reaches the response head that could split it (CR, LF) or that clients reject.
bool valid_media_type(std::string_view s) {
  auto slash = s.find('/');
  if (slash == std::string_view::npos) {
    return false;
  }
  auto end = s.find(';');
  std::string_view type = s.substr(0, slash);
  std::string_view subtype =
      s.substr(slash + 1, end == std::string_view::npos ? end : end - slash - 1);
  while (!subtype.empty() && subtype.back() == ' ') {
    subtype.remove_suffix(1);
  }
  if (!is_token(type) || !is_token(subtype)) {
    return false;
  }
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      return false;
    }
  }
  return true;
}

}  // namespace

log_config read_log(const yaml_reader& r, const yaml_field& field) {
  auto m = yaml_map::strict(r, field, {"access", "level", "client_address"});
  log_config log;
  if (auto f = m.get("access")) {
    log.access_at = location_of(*f);
    std::string access = read_nonempty_string(r, *f);
    if (access == "off") {
      log.access = access_log_sink::off;
    } else if (access == "stdout") {
      log.access = access_log_sink::stdout_stream;
    } else if (access == "stderr") {
      log.access = access_log_sink::stderr_stream;
    } else {
      for (char c : access) {
        if (static_cast<unsigned char>(c) < 0x20) {
          r.fail(*f, "expected off, stdout, stderr or a file path");
        }
      }
      if (access.back() == '/') {
        r.fail(*f, "expected a file path, not a directory (off, stdout, stderr or a file path)");
      }
      log.access = access_log_sink::file;
      log.access_path = std::move(access);
    }
  }
  if (auto f = m.get("level")) {
    log.level =
        read_enum(r, *f, {log_level::debug, log_level::info, log_level::warn, log_level::error});
  }
  if (auto f = m.get("client_address")) {
    log.client_address = read_enum(
        r, *f, {client_address_log::raw, client_address_log::hashed, client_address_log::off});
  }
  return log;
}

header_options read_headers(const yaml_reader& r, const yaml_field& field,
                            const header_options& defaults) {
  auto m = yaml_map::strict(r, field, {"enabled", "reset", "ietf_draft"});
  header_options h = defaults;
  if (auto f = m.get("enabled")) {
    h.enabled = read_bool(r, *f);
  }
  if (auto f = m.get("reset")) {
    h.reset_epoch = read_enum<bool>(r, *f, {{"delta", false}, {"epoch", true}});
  }
  if (auto f = m.get("ietf_draft")) {
    h.ietf_draft = read_bool(r, *f);
  }
  return h;
}

deny_config read_deny(const yaml_reader& r, const yaml_field& field, bool grpc) {
  auto m = yaml_map::strict(r, field, {"status", "body", "content_type"});
  // On a grpc route only the status applies: grpc_code_for makes it a call's grpc-status.
  for (const char* key : {"body", "content_type"}) {
    if (auto f = m.get(key); f && grpc) {
      r.fail(*f,
             "cannot be set on a grpc route: a gRPC call is denied Trailers-Only "
             "(content-type application/grpc, grpc-status and grpc-message, no body)");
    }
  }
  deny_config deny;
  if (auto f = m.get("status")) {
    deny.status = static_cast<unsigned>(read_uint(r, *f));
    if (deny.status < 400 || deny.status > 599) {
      r.fail(*f, "expected an error status from 400 to 599");
    }
  }
  if (auto f = m.get("body")) {
    deny.body = read_string(r, *f);
    if (deny.body->size() > k_max_deny_body) {
      r.fail(*f, "at most " + std::to_string(k_max_deny_body) + " bytes");
    }
    deny.content_type = "text/plain; charset=utf-8";
  }
  if (auto f = m.get("content_type")) {
    deny.content_type = read_nonempty_string(r, *f);
    if (!valid_media_type(deny.content_type)) {
      r.fail(*f, R"(expected a media type like "application/json" or "text/html; charset=utf-8")");
    }
  }
  return deny;
}

}  // namespace ratewall
