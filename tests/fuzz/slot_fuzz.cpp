// libFuzzer target: what the daemon reads from client-writable memory, on
// arbitrary bytes. The input becomes (a) a submission ring's cells and the
// consumer's start position, drained by a SubmissionConsumer, and (b) a
// segment header and file size checked by checkHeader(). Besides the
// sanitizers (the ring lives in exactly-sized heap buffers, so any read
// outside it is caught), it checks what a kOk and an accepted header promise.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <variant>
#include <vector>

#include "fuzz_input.hpp"
#include "shm/layout.hpp"
#include "shm/submission_ring.hpp"

namespace {

using namespace fairsched::shm;
using fairsched::fuzz::Bytes;
using fairsched::fuzz::require;

void fuzzRing(Bytes& in) {
  const auto capacity = std::uint32_t{1} << (1 + in.take(1) % 5);  // 2..32
  const auto tokens_per_slot = static_cast<std::uint32_t>(1 + in.take(1) % 16);
  const std::uint64_t start = in.take(8);
  SubmissionRingControl control{};
  std::vector<SubmissionCell> cells(capacity);
  std::vector<std::uint32_t> arena(std::size_t{capacity} * tokens_per_slot, 0xabababab);
  for (SubmissionCell& cell : cells) {
    cell.sequence = in.take(8);
    for (std::uint64_t& w : cell.words) w = in.take(8);
    for (std::uint32_t& w : cell.inline_words) w = static_cast<std::uint32_t>(in.take(4));
  }
  SubmissionRingMemory mem;
  mem.control = &control;
  mem.cells = cells.data();
  mem.capacity = capacity;
  mem.arena = arena.data();
  mem.tokens_per_slot = tokens_per_slot;

  SubmissionConsumer consumer(mem, start);
  std::vector<std::uint32_t> prompt;
  SubmissionSlot slot;
  for (std::uint32_t i = 0; i < 2 * capacity; ++i) {
    const std::uint64_t before = consumer.position();
    const PopResult r = consumer.tryPop(slot, prompt);
    if (r == PopResult::kOk) {
      require(checkSlot(slot, mem.arenaTokens()) == SlotCheck::kValid);
      // The prompt's ids (none when counts-only), its prefix hashes, then
      // the parameters; a prefix is 1..kMaxSlotPrefixBlocks hashes.
      require(prompt.size() == slot.arenaWords());
      require(slot.paramsBytes() <= kMaxParamsBytes);
      require(slot.arenaWords() == slot.promptWords() + slot.prefixWords() +
                                       (std::uint64_t{slot.paramsBytes()} + 3) / 4);
      if ((slot.flags & kSlotPrefix) != 0) {
        require(slot.prefixBlocks() >= 1 && slot.prefixBlocks() <= kMaxSlotPrefixBlocks);
      } else {
        require(slot.prefixBlocks() == 0);
      }
      if (slot.inlined()) {
        // Inline words come from the cell itself, never the arena.
        const SubmissionCell& cell = cells[before & (capacity - 1)];
        require(slot.prompt_offset == 0 && slot.arenaWords() <= kInlineWords);
        require(prompt.empty() ||
                std::memcmp(prompt.data(), cell.inline_words, prompt.size() * 4) == 0);
      } else {
        require(slot.prompt_offset + slot.arenaWords() <= mem.arenaTokens());
      }
      require(consumer.position() == before + 1);
      const std::uint64_t index = before & (capacity - 1);
      require(loadedSequence(cells[index].sequence, index) == before + capacity);
    } else {
      require(consumer.position() == before);
      if (r == PopResult::kCorrupt) {
        require(consumer.corrupt());
        require(consumer.tryPop(slot, prompt) == PopResult::kCorrupt);
        break;
      }
      require(r == PopResult::kEmpty);
      break;
    }
  }
}

void fuzzHeader(Bytes& in) {
  SegmentHeader h;
  std::uint8_t raw[sizeof(SegmentHeader)];
  for (std::uint8_t& b : raw) b = static_cast<std::uint8_t>(in.take(1));
  std::memcpy(&h, raw, sizeof(h));
  // Often a real header, so the deeper checks are reached.
  if (in.take(1) % 2 == 0) {
    Geometry g{static_cast<std::uint32_t>(in.take(2) % 300), std::uint32_t{1} << (in.take(1) % 18),
               static_cast<std::uint32_t>(in.take(3)), std::uint32_t{1} << (in.take(1) % 22)};
    Result<Layout> l = computeLayout(g, 4096);
    if (l.ok()) {
      h = makeHeader(l.value());
      // Then change one field.
      const std::size_t at = in.take(1) % sizeof(h);
      std::memcpy(raw, &h, sizeof(h));
      raw[at] ^= static_cast<std::uint8_t>(in.take(1));
      std::memcpy(&h, raw, sizeof(h));
    }
  }
  const std::uint64_t file_size = in.take(1) % 2 == 0 ? h.total_size : in.take(8);
  Result<Layout> r = checkHeader(h, file_size, 4096);
  if (r.ok()) {
    const Layout* l = &r.value();
    require(l->total_size == file_size);
    require(l->total_size <= kMaxSegmentBytes);
    require(l->writable_size + l->daemon_size == l->total_size);
    require(l->arena_offset + std::uint64_t{l->geometry.ring_count} * l->arena_ring_bytes <=
            l->writable_size);
    require(l->completion_cells_offset +
                std::uint64_t{l->geometry.completion_capacity} * sizeof(CompletionCell) <=
            l->total_size);
    const SegmentHeader again = makeHeader(*l);
    require(std::memcmp(&again, &h, sizeof(h)) == 0);
  } else {
    require(!r.error().message.empty());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Bytes in{data, size};
  if (in.take(1) % 2 == 0) {
    fuzzRing(in);
  } else {
    fuzzHeader(in);
  }
  return 0;
}
