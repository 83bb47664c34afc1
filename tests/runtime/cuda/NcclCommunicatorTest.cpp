//===- NcclCommunicatorTest.cpp - NCCL's communication on a 2 x 2 mesh ----===//
//
// Run by CTest under `mpirun -np 4` against the emulated NCCL
// (runtime/cuda/emu/Nccl.cpp): the ranks meet through the rendezvous (rank
// 0 picks a free port and tells the others through MPI, as a launcher's
// MASTER_PORT would), each rank checks what it gets from the others group
// by group against values derived from the ranks' numbers, and messages go
// both ways along the pipeline axis. A second communicator is bootstrapped
// through MPI (comm::MpiBroadcastFromRoot) with a rendezvous address no
// rank can reach. Any failing rank fails the job.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/NcclCommunicator.h"
#include "runtime/comm/MpiCommunicator.h"
#include "runtime/comm/Rendezvous.h"
#include "runtime/common/Float16.h"
#include "runtime/plan/PlanLoader.h"

#include "tests/runtime/comm/FreePort.h"

#include "gtest/gtest.h"

#include <cuda_runtime_api.h>
#include <mpi.h>

#include <cstring>
#include <memory>
#include <vector>

using namespace braid;

namespace {

std::unique_ptr<cuda::NcclCommunicator> theComm;
/// The same job's communicator, its NCCL id handed over through MPI.
std::unique_ptr<cuda::NcclCommunicator> mpiBootstrapped;
cudaStream_t theStream = nullptr;

plan::Plan meshPlan() {
  plan::Plan plan;
  plan.set_version(plan::SCHEMA_VERSION_CURRENT);
  plan.mutable_mesh()->add_axes("pp");
  plan.mutable_mesh()->add_sizes(2);
  plan.mutable_mesh()->add_axes("tp");
  plan.mutable_mesh()->add_sizes(2);
  return plan;
}

/// `n` elements of T in device memory, filled from `host`.
template <typename T> class DeviceBuffer {
public:
  explicit DeviceBuffer(const std::vector<T> &host) : n_(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void **>(&p_), n_ * sizeof(T)),
              cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p_, host.data(), n_ * sizeof(T),
                         cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(p_); }
  T *get() { return p_; }
  std::vector<T> host() {
    EXPECT_EQ(cudaStreamSynchronize(theStream), cudaSuccess);
    std::vector<T> out(n_);
    EXPECT_EQ(cudaMemcpy(out.data(), p_, n_ * sizeof(T),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }

private:
  T *p_ = nullptr;
  size_t n_;
};

// Ranks 0..3 are (pp, tp) = (0,0), (0,1), (1,0), (1,1).
TEST(NcclCommunicator, BootstrapsThroughMpi) {
  // Sums over the whole mesh on the communicator whose id came over MPI.
  ASSERT_NE(mpiBootstrapped, nullptr);
  int64_t r = mpiBootstrapped->Rank();
  EXPECT_EQ(r, theComm->Rank());
  DeviceBuffer<double> x({double(r + 1)});
  ASSERT_TRUE(
      mpiBootstrapped->AllReduce({"pp", "tp"}, x.get(), 1, plan::F64).ok());
  EXPECT_EQ(x.host()[0], 1.0 + 2.0 + 3.0 + 4.0);
}

TEST(MpiBroadcastFromRoot, GivesRankZerosBytesAndRefusesAnotherTag) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string bytes = rank == 0 ? std::string("rank 0's\0id", 11) : "mine";
  absl::Status s =
      comm::MpiBroadcastFromRoot(rank == 1 ? "another plan" : "plan", bytes);
  EXPECT_EQ(bytes, std::string("rank 0's\0id", 11));
  if (rank == 1) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(s.message().find("rank 1 of the MPI job is 'another plan' but "
                               "rank 0 is 'plan'"),
              std::string::npos)
        << s;
  } else {
    EXPECT_TRUE(s.ok()) << s;
  }
}

TEST(NcclCommunicator, CoordinatesAreRowMajor) {
  int64_t r = theComm->Rank();
  EXPECT_EQ(theComm->Coordinates(), std::vector<int64_t>({r / 2, r % 2}));
}

TEST(NcclCommunicator, ReducesOverTheNamedAxes) {
  int64_t r = theComm->Rank(), p = r / 2, t = r % 2;
  DeviceBuffer<float> x({float(r + 1), 10.0f * (r + 1)});
  ASSERT_TRUE(theComm->AllReduce({"tp"}, x.get(), 2, plan::F32).ok());
  // tp group of rank r: ranks 2p and 2p+1.
  EXPECT_EQ(x.host(), std::vector<float>({float(4 * p + 3), 10.0f * (4 * p + 3)}));
  DeviceBuffer<double> y({double(r)});
  ASSERT_TRUE(theComm->AllReduce({"pp", "tp"}, y.get(), 1, plan::F64).ok());
  EXPECT_EQ(y.host()[0], 6.0);
  // bf16 maxima over pp: ranks t and t + 2.
  DeviceBuffer<uint16_t> m({floatToBfloat16(-float(r))});
  ASSERT_TRUE(
      theComm->AllReduce({"pp"}, m.get(), 1, plan::BF16, exec::Reduction::kMax)
          .ok());
  EXPECT_EQ(bfloat16ToFloat(m.host()[0]), -float(t));
  // A reduce-scatter over tp: rank g sends 10 g + i; place t gets block t.
  DeviceBuffer<float> in({10.0f * r, 10.0f * r + 1, 10.0f * r + 2,
                          10.0f * r + 3}),
      out({-1.0f, -1.0f});
  ASSERT_TRUE(
      theComm->ReduceScatter({"tp"}, in.get(), out.get(), 2, plan::F32).ok());
  float base = 10.0f * (4 * p + 1);
  EXPECT_EQ(out.host(), std::vector<float>({base + 2 * (2 * t),
                                            base + 2 * (2 * t + 1)}));
}

// Sums started on the stream of collectives (the gradients' buckets of the
// last micro-batch): two in flight over different groups while the compute
// stream runs a sum of its own, then the compute stream waits for them;
// each is what the blocking sum gives.
TEST(NcclCommunicator, AllReducesInFlight) {
  int64_t r = theComm->Rank(), p = r / 2, t = r % 2;
  DeviceBuffer<float> overPp({float(r + 1), 10.0f * (r + 1)});
  DeviceBuffer<double> overBoth({double(r)});
  absl::StatusOr<int64_t> a =
      theComm->StartAllReduce({"pp"}, overPp.get(), 2, plan::F32);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<int64_t> b =
      theComm->StartAllReduce({"pp", "tp"}, overBoth.get(), 1, plan::F64);
  ASSERT_TRUE(b.ok()) << b.status();
  DeviceBuffer<float> meanwhile({float(r)});
  ASSERT_TRUE(theComm->AllReduce({"tp"}, meanwhile.get(), 1, plan::F32).ok());
  ASSERT_TRUE(theComm->Wait(*b).ok());
  ASSERT_TRUE(theComm->Wait(*a).ok());
  EXPECT_EQ(meanwhile.host()[0], float(4 * p + 1));
  EXPECT_EQ(overBoth.host()[0], 6.0);
  // pp group of rank r: ranks t and t + 2.
  EXPECT_EQ(overPp.host(),
            std::vector<float>({float(2 * t + 4), 10.0f * (2 * t + 4)}));
}

TEST(NcclCommunicator, GathersInAxisOrder) {
  int64_t r = theComm->Rank(), p = r / 2, t = r % 2;
  DeviceBuffer<float> mine({float(r), 100.0f + r}), all({0, 0, 0, 0});
  ASSERT_TRUE(
      theComm->AllGather({"tp"}, mine.get(), all.get(), 2, plan::F32).ok());
  EXPECT_EQ(all.host(), std::vector<float>({float(2 * p), 100.0f + 2 * p,
                                            float(2 * p + 1),
                                            101.0f + 2 * p}));
  // In place: this rank's block already sits at its place.
  std::vector<float> flat(4, -1.0f);
  flat[size_t(2 * t)] = float(r);
  flat[size_t(2 * t + 1)] = float(r) + 0.5f;
  DeviceBuffer<float> inPlace(flat);
  ASSERT_TRUE(theComm
                  ->AllGather({"tp"}, inPlace.get() + 2 * t, inPlace.get(), 2,
                              plan::F32)
                  .ok());
  EXPECT_EQ(inPlace.host(),
            std::vector<float>({float(2 * p), 2 * p + 0.5f, float(2 * p + 1),
                                2 * p + 1.5f}));
}

// Each stage sends to the other before it receives (the order of a
// pipeline's steady state at its ends), and overwrites its message once
// the send is done.
TEST(NcclCommunicator, MessagesBothWaysAlongAnAxis) {
  int64_t r = theComm->Rank(), p = r / 2;
  int64_t towards = p == 0 ? 1 : -1;
  DeviceBuffer<float> message({float(r), float(r) * 2, float(r) * 3});
  DeviceBuffer<float> got({0, 0, 0});
  ASSERT_TRUE(
      theComm->Send("pp", towards, message.get(), 3, plan::F32).ok());
  cudaEvent_t done;
  ASSERT_EQ(cudaEventCreate(&done), cudaSuccess);
  ASSERT_TRUE(theComm->RecordSendsDone(done).ok());
  ASSERT_EQ(cudaStreamWaitEvent(theStream, done, 0), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(message.get(), 0, 3 * sizeof(float), theStream),
            cudaSuccess);
  ASSERT_TRUE(theComm->Recv("pp", towards, got.get(), 3, plan::F32).ok());
  ASSERT_TRUE(theComm->WaitSends().ok());
  // The peer is the rank of the other stage with this tp coordinate.
  float peer = float(r + 2 * towards);
  EXPECT_EQ(got.host(), std::vector<float>({peer, peer * 2, peer * 3}));
  cudaEventDestroy(done);
}

// The trainer's own values are host memory, which NCCL cannot read (the
// emulated NCCL refuses it, as a GPU would fail): they are staged through
// device memory, and ready when the call returns.
TEST(NcclCommunicator, StagesHostBuffers) {
  int64_t r = theComm->Rank(), p = r / 2, t = r % 2;
  double sum = double(r);
  ASSERT_TRUE(theComm->AllReduce({"pp", "tp"}, &sum, 1, plan::F64).ok());
  EXPECT_EQ(sum, 6.0);
  std::vector<double> mine = {double(r)}, all(2, -1);
  ASSERT_TRUE(
      theComm->AllGather({"tp"}, mine.data(), all.data(), 1, plan::F64).ok());
  EXPECT_EQ(all, std::vector<double>({double(2 * p), double(2 * p + 1)}));
  std::vector<float> in = {float(r), 10.0f * r};
  float out = -1;
  ASSERT_TRUE(theComm->ReduceScatter({"tp"}, in.data(), &out, 1, plan::F32)
                  .ok());
  EXPECT_EQ(out, t == 0 ? float(4 * p + 1) : 10.0f * (4 * p + 1));
  int64_t towards = p == 0 ? 1 : -1;
  std::vector<float> message = {float(r), 0.5f}, got(2, 0);
  ASSERT_TRUE(theComm->Send("pp", towards, message.data(), 2, plan::F32).ok());
  message[0] = -1; // the message was taken when Send returned
  ASSERT_TRUE(theComm->Recv("pp", towards, got.data(), 2, plan::F32).ok());
  ASSERT_TRUE(theComm->WaitSends().ok());
  EXPECT_EQ(got, std::vector<float>({float(r + 2 * towards), 0.5f}));
}

TEST(NcclCommunicator, NamesAPeerOutsideTheAxis) {
  int64_t p = theComm->Rank() / 2;
  float x = 0;
  absl::Status s = theComm->Send("pp", p == 0 ? -1 : 1, &x, 1, plan::F32);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(s.message().find("a send at offset " +
                             std::to_string(p == 0 ? -1 : 1) +
                             " along 'pp' from coordinate " +
                             std::to_string(p) + ": there is no such rank"),
            std::string::npos)
      << s;
  s = theComm->Recv("dp", 1, &x, 1, plan::F32);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("a receive along 'dp', which is not a mesh axis"),
            std::string::npos)
      << s;
}

} // namespace

int main(int argc, char **argv) {
  ::testing::InitGoogleTest(&argc, argv);
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int port = rank == 0 ? braid::testutil::FreePort() : 0;
  MPI_Bcast(&port, 1, MPI_INT, 0, MPI_COMM_WORLD);
  comm::RendezvousConfig config;
  config.rank = rank;
  config.worldSize = size;
  config.port = port;
  config.timeoutSeconds = 60;
  // A job of the wrong size is refused before anything is joined.
  comm::RendezvousConfig wrong = config;
  wrong.worldSize = size + 1;
  absl::StatusOr<std::unique_ptr<cuda::NcclCommunicator>> refused =
      cuda::NcclCommunicator::Create(meshPlan(), wrong);
  bool ok = !refused.ok() &&
            refused.status().message().find(
                "the plan is for 4 ranks (pp 2 x tp 2) but the job has 5") !=
                std::string::npos;
  if (!ok)
    std::cerr << "rank " << rank << ": expected a refusal, got "
              << refused.status() << "\n";
  absl::StatusOr<std::unique_ptr<cuda::NcclCommunicator>> created =
      cuda::NcclCommunicator::Create(meshPlan(), config);
  if (!created.ok()) {
    std::cerr << "rank " << rank << ": " << created.status() << "\n";
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  theComm = std::move(*created);
  // TEST-NET-1 (RFC 5737) is never routed: rank 0 could not listen there
  // nor the others connect, so this one's id must come over MPI.
  comm::RendezvousConfig unreachable = config;
  unreachable.host = "192.0.2.1";
  unreachable.timeoutSeconds = 5;
  absl::StatusOr<std::unique_ptr<cuda::NcclCommunicator>> viaMpi =
      cuda::NcclCommunicator::Create(meshPlan(), unreachable,
                                     comm::MpiBroadcastFromRoot);
  if (!viaMpi.ok()) {
    std::cerr << "rank " << rank << ": " << viaMpi.status() << "\n";
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  mpiBootstrapped = std::move(*viaMpi);
  cudaStreamCreate(&theStream);
  (void)theComm->SetStream(theStream);
  (void)mpiBootstrapped->SetStream(theStream);
  int rc = RUN_ALL_TESTS() || !ok;
  theComm.reset();
  mpiBootstrapped.reset();
  cudaStreamDestroy(theStream);
  int worst = 0;
  MPI_Allreduce(&rc, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
