#pragma once

// The completion token of every awaited Asio operation, for the modules that link
// ratewall_asio (limit, redis, tls, proxy, admin).

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/deferred.hpp>

namespace ratewall {

/// Awaited with this token, an operation yields its error code with its results instead of
/// throwing, and runs inside the awaiting coroutine's frame: with use_awaitable each would start
/// a coroutine of its own, a frame to allocate and free (boost/asio/impl/awaitable.hpp).
inline constexpr auto use_tuple = boost::asio::as_tuple(boost::asio::deferred);

}  // namespace ratewall
