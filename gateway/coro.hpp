// The asio vocabulary the gateway's parts share (no Beast here): an
// io_context per gateway thread runs them, as C++20 coroutines.
#pragma once

#include <utility>  // before asio: Boost 1.74's awaitable.hpp needs std::exchange

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <exception>

namespace fairsched::gateway {

namespace asio = boost::asio;
// Every handler, coroutine, socket and timer names the io_context's own
// executor rather than asio's type-erased default (any_io_executor): the
// type erasure's copies and dispatch were about 8 % of the gateway's CPU
// per request.
using Executor = asio::io_context::executor_type;
template <typename T>
using awaitable = asio::awaitable<T, Executor>;
inline constexpr asio::use_awaitable_t<Executor> use_awaitable{};
using SteadyTimer =
    asio::basic_waitable_timer<std::chrono::steady_clock,
                               asio::wait_traits<std::chrono::steady_clock>, Executor>;
using boost::system::error_code;
using std::chrono::milliseconds;

// Logs the exception a gateway task ended with (gateway_server.cpp).
void logTaskFailure(std::exception_ptr e);

// Runs the coroutine `a` on `where` (an io_context or an executor); an
// exception it ends with is logged.
template <typename Where, typename A>
void spawn(Where&& where, A&& a) {
  asio::co_spawn(std::forward<Where>(where), std::forward<A>(a), [](std::exception_ptr e) {
    if (e) logTaskFailure(e);
  });
}

}  // namespace fairsched::gateway
