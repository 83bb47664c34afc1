//===- MpiCommunicatorTest.cpp - Collectives on a 2 x 2 mesh --------------===//
//
// Run by CTest under `mpirun -np 4`: each rank checks what it receives from
// the others, group by group, against values derived from the ranks'
// numbers. Any failing rank fails the job.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/MpiCommunicator.h"
#include "runtime/plan/PlanLoader.h"

#include "gtest/gtest.h"

#include <memory>

using namespace braid;

namespace {

std::unique_ptr<comm::MpiCommunicator> theComm;

plan::Plan meshPlan() {
  plan::Plan plan;
  plan.set_version(plan::SCHEMA_VERSION_CURRENT);
  plan.mutable_mesh()->add_axes("dp");
  plan.mutable_mesh()->add_sizes(2);
  plan.mutable_mesh()->add_axes("tp");
  plan.mutable_mesh()->add_sizes(2);
  return plan;
}

// Ranks 0..3 are (dp, tp) = (0,0), (0,1), (1,0), (1,1): tp is the minor axis.
TEST(MpiCommunicator, CoordinatesAreRowMajor) {
  int64_t r = theComm->Rank();
  EXPECT_EQ(theComm->Coordinates(), std::vector<int64_t>({r / 2, r % 2}));
}

// A sum over tp adds the two ranks of a dp coordinate; over dp, the two of a
// tp coordinate; over both, all four.
TEST(MpiCommunicator, AllReducesOverTheNamedAxes) {
  int64_t r = theComm->Rank(), d = r / 2, t = r % 2;
  auto sum = [&](std::vector<std::string> axes) {
    std::vector<double> x = {double(r + 1), 10.0 * (r + 1)};
    EXPECT_TRUE(theComm->AllReduce(axes, x.data(), 2, plan::F64).ok());
    return x;
  };
  // tp group of rank r: ranks 2d and 2d+1.
  EXPECT_EQ(sum({"tp"}), std::vector<double>({double(4 * d + 3), 10.0 * (4 * d + 3)}));
  // dp group: ranks t and t+2.
  EXPECT_EQ(sum({"dp"}), std::vector<double>({double(2 * t + 4), 10.0 * (2 * t + 4)}));
  EXPECT_EQ(sum({"dp", "tp"}), std::vector<double>({10.0, 100.0}));
  // The maximum over tp is the rank with the larger tp coordinate.
  double m = double(r);
  ASSERT_TRUE(theComm->AllReduce({"tp"}, &m, 1, plan::F64, exec::Reduction::kMax).ok());
  EXPECT_EQ(m, double(2 * d + 1));
  std::vector<float> f = {float(r)};
  ASSERT_TRUE(theComm->AllReduce({"tp"}, f.data(), 1, plan::F32).ok());
  EXPECT_EQ(f[0], float(4 * d + 1));
}

// A gather over tp returns the group's contributions in tp order.
TEST(MpiCommunicator, AllGatherIsInAxisOrder) {
  int64_t r = theComm->Rank(), d = r / 2;
  std::vector<double> mine = {double(r), double(100 + r)}, all(4);
  ASSERT_TRUE(theComm->AllGather({"tp"}, mine.data(), all.data(), 2, plan::F64).ok());
  EXPECT_EQ(all, std::vector<double>({double(2 * d), 100.0 + 2 * d,
                                      double(2 * d + 1), 101.0 + 2 * d}));
}

TEST(MpiCommunicator, RefusesIntegerDtypes) {
  int32_t x = 1;
  absl::Status s = theComm->AllReduce({"tp"}, &x, 1, plan::I32);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
}

} // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // A plan for 4 ranks joins only a job of 4.
  absl::StatusOr<std::unique_ptr<comm::MpiCommunicator>> created =
      comm::MpiCommunicator::Create(meshPlan());
  if (!created.ok()) {
    std::fprintf(stderr, "%s\n", std::string(created.status().message()).c_str());
    return 1;
  }
  theComm = std::move(*created);
  int rc = RUN_ALL_TESTS();
  // Every rank's verdict: one failing rank fails them all.
  double failed = rc != 0;
  (void)theComm->AllReduce({"dp", "tp"}, &failed, 1, plan::F64);
  theComm.reset();
  return failed > 0 ? 1 : 0;
}
