#include "ratewall/redis/reply.hpp"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <charconv>
#include <new>
#include <string>

namespace ratewall::redis {

std::string_view reply::error_code() const {
  if (type != kind::error) {
    return {};
  }
  std::string_view s = str;
  return s.substr(0, s.find(' '));
}

reply reply::make_string(std::string s) {
  reply r;
  r.type = kind::string;
  r.str = std::move(s);
  return r;
}

reply reply::make_status(std::string s) {
  reply r;
  r.type = kind::status;
  r.str = std::move(s);
  return r;
}

reply reply::make_error(std::string s) {
  reply r;
  r.type = kind::error;
  r.str = std::move(s);
  return r;
}

reply reply::make_integer(std::int64_t v) {
  reply r;
  r.type = kind::integer;
  r.integer = v;
  return r;
}

reply reply::make_array(std::vector<reply> items) {
  reply r;
  r.type = kind::array;
  r.elements = std::move(items);
  return r;
}

namespace {

reply convert(const redisReply& in) {
  reply out;
  switch (in.type) {
    case REDIS_REPLY_STRING:
      out.type = reply::kind::string;
      out.str.assign(in.str, in.len);
      break;
    case REDIS_REPLY_STATUS:
      out.type = reply::kind::status;
      out.str.assign(in.str, in.len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = reply::kind::error;
      out.str.assign(in.str, in.len);
      break;
    case REDIS_REPLY_INTEGER:
      out.type = reply::kind::integer;
      out.integer = in.integer;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = reply::kind::array;
      out.elements.reserve(in.elements);
      for (std::size_t i = 0; i < in.elements; ++i) {
        out.elements.push_back(convert(*in.element[i]));
      }
      break;
    default:
      out.type = reply::kind::nil;
      break;
  }
  return out;
}

// hiredis's own reply functions, with arrays bounded (see reply_reader): copied from the first
// reader made, whose functions are hiredis's defaults.
redisReplyObjectFunctions g_default_functions;
redisReplyObjectFunctions g_bounded_functions;

void* create_bounded_array(const redisReadTask* task, int elements) {
  if (elements > reply_reader::k_max_elements) {
    return nullptr;  // hiredis reports "Out of memory": a protocol error, the connection ends
  }
  return g_default_functions.createArray(task, elements);
}

redisReplyObjectFunctions* bounded_functions(const redisReader& first) {
  static const bool made = [&first] {
    g_default_functions = *first.fn;
    g_bounded_functions = *first.fn;
    g_bounded_functions.createArray = create_bounded_array;
    return true;
  }();
  (void)made;
  return &g_bounded_functions;
}

}  // namespace

struct reply_reader::impl {
  redisReader* reader = nullptr;
  std::size_t fed_since_reply = 0;  // bytes of the reply under way, and of those after it
  std::string error;                // ours, when hiredis's errstr says nothing
};

reply_reader::reply_reader() : impl_(std::make_unique<impl>()) {
  reset();
}

reply_reader::~reply_reader() {
  if (impl_->reader != nullptr) {
    redisReaderFree(impl_->reader);
  }
}

void reply_reader::reset() {
  if (impl_->reader != nullptr) {
    redisReaderFree(impl_->reader);
  }
  impl_->reader = redisReaderCreate();
  if (impl_->reader == nullptr) {
    throw std::bad_alloc();
  }
  impl_->reader->fn = bounded_functions(*impl_->reader);
  impl_->fed_since_reply = 0;
  impl_->error.clear();
}

void reply_reader::feed(const char* data, std::size_t n) {
  redisReaderFeed(impl_->reader, data, n);
  impl_->fed_since_reply += n;
}

reply_reader::status reply_reader::next(reply& out) {
  if (!impl_->error.empty()) {
    return status::protocol_error;
  }
  void* raw = nullptr;
  if (redisReaderGetReply(impl_->reader, &raw) != REDIS_OK) {
    if (impl_->reader->err == REDIS_ERR_OOM) {
      impl_->error = "a reply with an array of more than " + std::to_string(k_max_elements) +
                     " elements (or out of memory)";
    }
    return status::protocol_error;
  }
  const redisReader& r = *impl_->reader;
  const std::size_t after = r.len - r.pos;  // buffered bytes the parser has not taken
  if (raw == nullptr) {
    // Bytes taken into the reply under way (an array's finished elements) are counted too.
    if (impl_->fed_since_reply > k_max_reply_bytes) {
      impl_->error = "a reply larger than " + std::to_string(k_max_reply_bytes) + " bytes";
      return status::protocol_error;
    }
    return status::incomplete;
  }
  impl_->fed_since_reply = after;  // what follows this reply belongs to the next
  out = convert(*static_cast<redisReply*>(raw));
  freeReplyObject(raw);
  return status::reply;
}

std::string reply_reader::error() const {
  return impl_->error.empty() ? std::string(impl_->reader->errstr) : impl_->error;
}

namespace {

void append_header(std::string& out, char type, std::size_t n) {
  char text[24];
  text[0] = type;
  char* end = std::to_chars(text + 1, text + sizeof text - 2, n).ptr;
  *end++ = '\r';
  *end++ = '\n';
  out.append(text, static_cast<std::size_t>(end - text));
}

}  // namespace

// RESP by hand: hiredis's redisFormatCommandArgv writes every length with sprintf, which cost
// about 750 instructions per argument (callgrind), more than the rest of a limit check. The
// bytes are the same; reply_test checks them against hiredis's.
void append_command(std::string& out, std::span<const std::string_view> args) {
  std::size_t size = 16;
  for (std::string_view a : args) {
    size += a.size() + 16;
  }
  if (out.capacity() < out.size() + size) {
    // Geometric, so that appending many commands to one buffer stays linear.
    out.reserve(std::max(out.size() + size, 2 * out.capacity()));
  }
  append_header(out, '*', args.size());
  for (std::string_view a : args) {
    append_header(out, '$', a.size());
    out.append(a);
    out.append("\r\n", 2);
  }
}

std::string format_command(std::span<const std::string_view> args) {
  std::string out;
  append_command(out, args);
  return out;
}

}  // namespace ratewall::redis
