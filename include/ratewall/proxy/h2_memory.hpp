#pragma once

// The memory nghttp2 works with (DESIGN §12). A stream costs nghttp2 a few allocations (its
// state, its outbound frames, the copied response header block; HPACK's new table entries),
// each freed within milliseconds. With dozens of streams in flight, glibc's per-thread cache
// (seven blocks a size) overflows and many of them take malloc's slow path. nghttp2 lets its
// user supply the allocator; this one takes its blocks from block_pool, whose freed blocks the
// thread keeps for the next stream (blocks past its largest class, such as a response header
// block of more than about 500 bytes, go to operator new as before).

#include <nghttp2/nghttp2.h>

namespace ratewall {

/// The allocator every h2 session of the gateway is created with. nghttp2 frees without a size,
/// so each block starts with the size it was asked for. Stateless and thread-safe: a block
/// freed on another thread joins that thread's lists (block_pool).
nghttp2_mem* h2_memory();

}  // namespace ratewall
