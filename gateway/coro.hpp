// The asio vocabulary the gateway's parts share (no Beast here): one
// io_context on one thread runs them all, as C++20 coroutines.
#pragma once

#include <utility>  // before asio: Boost 1.74's awaitable.hpp needs std::exchange

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <exception>

namespace fairsched::gateway {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using boost::system::error_code;
using std::chrono::milliseconds;

// Logs the exception a gateway task ended with (gateway_server.cpp).
void logTaskFailure(std::exception_ptr e);

// Runs the coroutine `a` on `io`; an exception it ends with is logged.
template <typename A>
void spawn(asio::io_context& io, A&& a) {
  asio::co_spawn(io, std::forward<A>(a), [](std::exception_ptr e) {
    if (e) logTaskFailure(e);
  });
}

}  // namespace fairsched::gateway
