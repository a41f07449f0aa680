// Writing a message's buffers to a Beast stream: at once, with one
// non-blocking sendmsg, where the socket takes them all (a head and a body
// smaller than the send buffer: nearly always), else what is left as an
// asynchronous write bounded by the stream's timeout. The common case
// allocates no operation and makes no hop through the loop: the coroutine
// goes on without suspending.
#pragma once

#include <boost/asio/buffer.hpp>
#include <boost/asio/write.hpp>

#include <array>
#include <chrono>
#include <cstddef>
#include <string_view>

#include "gateway/coro.hpp"

namespace fairsched::gateway {

inline asio::const_buffer bytes(std::string_view s) {
  return {s.data(), s.size()};
}

// `stream`: a beast::basic_stream; `timeout` bounds the asynchronous rest.
template <typename Stream, std::size_t N>
awaitable<error_code> writeBuffers(Stream& stream, std::array<asio::const_buffer, N> bufs,
                                   std::chrono::milliseconds timeout) {
  error_code ec;
  auto& socket = stream.socket();
  if (!socket.non_blocking()) socket.non_blocking(true, ec);
  const std::size_t total = asio::buffer_size(bufs);
  std::size_t done = total == 0 ? 0 : socket.write_some(bufs, ec);
  if (done == total && !ec) co_return ec;
  if (ec && ec != asio::error::would_block && ec != asio::error::try_again) co_return ec;
  // Skip what went out; the rest waits for room in the send buffer.
  for (asio::const_buffer& b : bufs) {
    const std::size_t skip = std::min(done, b.size());
    b += skip;
    done -= skip;
  }
  ec = {};
  stream.expires_after(timeout);
  co_await asio::async_write(stream, bufs, asio::redirect_error(use_awaitable, ec));
  co_return ec;
}

}  // namespace fairsched::gateway
