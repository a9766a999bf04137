#pragma once

// The memory nghttp2 works with (DESIGN §12). A stream costs nghttp2 about sixteen small
// allocations (the stream, its frames, the copied header blocks, HPACK's table entries), each
// freed within a few milliseconds. With dozens of streams in flight, glibc's per-thread cache
// (seven blocks a size) overflows and most of them take malloc's slow path. nghttp2 lets its
// user supply the allocator; this one takes its blocks from block_pool, whose freed blocks the
// thread keeps for the next stream.

#include <nghttp2/nghttp2.h>

namespace ratewall {

/// The allocator every h2 session of the gateway is created with. nghttp2 frees without a size,
/// so each block starts with the size it was asked for. Stateless and thread-safe: a block
/// freed on another thread joins that thread's lists (block_pool).
nghttp2_mem* h2_memory();

}  // namespace ratewall
