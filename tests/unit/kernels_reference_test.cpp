// The CPU references of the kernels (kernels/pack_reference.hpp,
// kernels/workload_reference.hpp): what the CUDA kernels and every executor
// are compared against.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/pack_reference.hpp"
#include "kernels/workload_reference.hpp"

namespace fairsched::kernels {
namespace {

using U32 = std::vector<std::uint32_t>;

TEST(PackReference, EmptyBatchHasOnlyTheLeadingZero) {
  const PackedLayout p = packReference({});
  EXPECT_EQ(p.cu_seqlens, U32{0});
  EXPECT_TRUE(p.positions.empty());
  EXPECT_TRUE(p.seq_ids.empty());
}

TEST(PackReference, OneToken) {
  const PackedLayout p = packReference(U32{1});
  EXPECT_EQ(p.cu_seqlens, (U32{0, 1}));
  EXPECT_EQ(p.positions, U32{0});
  EXPECT_EQ(p.seq_ids, U32{0});
}

TEST(PackReference, RaggedBatchWithZeroLengthRequests) {
  const PackedLayout p = packReference(U32{3, 0, 1, 2, 0});
  EXPECT_EQ(p.cu_seqlens, (U32{0, 3, 3, 4, 6, 6}));
  EXPECT_EQ(p.positions, (U32{0, 1, 2, 0, 0, 1}));
  EXPECT_EQ(p.seq_ids, (U32{0, 0, 0, 2, 3, 3}));
}

TEST(PackReference, CuSeqlensAreExclusivePrefixSums) {
  std::mt19937 rng(7);
  U32 lengths(1000);
  for (auto& l : lengths) l = rng() % 50;
  const PackedLayout p = packReference(lengths);
  ASSERT_EQ(p.cu_seqlens.size(), lengths.size() + 1);
  std::uint32_t sum = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    EXPECT_EQ(p.cu_seqlens[r], sum);
    for (std::uint32_t i = 0; i < lengths[r]; ++i) {
      EXPECT_EQ(p.positions[sum + i], i);
      EXPECT_EQ(p.seq_ids[sum + i], r);
    }
    sum += lengths[r];
  }
  EXPECT_EQ(p.cu_seqlens.back(), sum);
  EXPECT_EQ(p.positions.size(), sum);
}

// The workload spelled out the long way: materialize the table, gather rows,
// sum the output, then sum the checksum terms.
WorkloadResult straightforward(const U32& prompt, const WorkloadShape& shape) {
  std::vector<U32> table(shape.vocab, U32(shape.dim));
  for (std::uint32_t v = 0; v < shape.vocab; ++v) {
    for (std::uint32_t d = 0; d < shape.dim; ++d) table[v][d] = tableValue(v, d);
  }
  std::vector<U32> rows;
  for (std::uint32_t t : prompt) rows.push_back(table[t % shape.vocab]);
  WorkloadResult r;
  r.output.assign(shape.dim, 0);
  for (const U32& row : rows) {
    for (std::uint32_t d = 0; d < shape.dim; ++d) r.output[d] += row[d];
  }
  r.checksum = checksumSeed(prompt.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    for (std::uint32_t d = 0; d < shape.dim; ++d)
      r.checksum += checksumTerm(rows[i][d], i * shape.dim + d);
  }
  return r;
}

TEST(WorkloadReference, MatchesAStraightforwardLoop) {
  std::mt19937 rng(11);
  for (const WorkloadShape shape : {WorkloadShape{}, WorkloadShape{97, 1}, WorkloadShape{5, 33}}) {
    for (std::size_t len : {0u, 1u, 2u, 17u, 300u}) {
      U32 prompt(len);
      for (auto& t : prompt) t = rng();
      const WorkloadResult want = straightforward(prompt, shape);
      const WorkloadResult got = runWorkload(prompt, shape);
      EXPECT_EQ(got.output, want.output) << "len " << len << " dim " << shape.dim;
      EXPECT_EQ(got.checksum, want.checksum) << "len " << len << " dim " << shape.dim;
      EXPECT_EQ(workloadChecksum(prompt, shape), want.checksum);
    }
  }
}

TEST(WorkloadReference, TokenIdsAreTakenModuloTheVocab) {
  const WorkloadShape shape{100, 4};
  EXPECT_EQ(workloadChecksum(U32{5, 250}, shape), workloadChecksum(U32{105, 50}, shape));
  EXPECT_EQ(runWorkload(U32{5}, shape).output, runWorkload(U32{205}, shape).output);
}

TEST(WorkloadReference, EmptyPromptHasAChecksumAndAZeroOutput) {
  const WorkloadResult r = runWorkload({});
  EXPECT_EQ(r.output, U32(WorkloadShape{}.dim, 0));
  EXPECT_EQ(r.checksum, checksumSeed(0));
  EXPECT_NE(workloadChecksum(U32{}), workloadChecksum(U32{0}));
}

TEST(WorkloadReference, ARequestMixedUpInABatchChangesItsChecksum) {
  const U32 a{1, 2, 3, 4}, b{9, 8, 7};
  const std::uint64_t ca = workloadChecksum(a);
  EXPECT_EQ(ca, workloadChecksum(a));                                // deterministic
  EXPECT_NE(ca, workloadChecksum(U32{2, 1, 3, 4}));                  // tokens swapped
  EXPECT_NE(ca, workloadChecksum(U32{1, 2, 3}));                     // token dropped
  EXPECT_NE(ca, workloadChecksum(U32{1, 2, 3, 4, 9}));               // neighbour's token gathered
  EXPECT_NE(ca, workloadChecksum(U32{4, 9, 8, 7}));                  // offset off by three
  EXPECT_NE(ca, workloadChecksum(b));                                // another request's result
  EXPECT_NE(workloadChecksum(U32{0}), workloadChecksum(U32{0, 0}));  // trailing zero
}

}  // namespace
}  // namespace fairsched::kernels
