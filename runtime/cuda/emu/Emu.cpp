//===- Emu.cpp - The CUDA emulation's threads, warps and runtime ----------===//
//
// Emu.h describes what is emulated. A block's threads are fibers on the
// launching thread (a stack each; switched by a few instructions on x86-64,
// by ucontext elsewhere, whose switches also save the signal mask, a system
// call each); the scheduler runs every ready fiber until it
// waits (at __syncthreads, or at a warp-collective operation), then releases
// the warps whose lanes have all arrived, else the block's barrier once
// every thread still running waits there, and reports anything else as a
// divergent barrier.
//
// Warp-collective operations pass values through per-warp slots in two
// banks, alternating with each operation: a lane that has read the slots of
// operation n and gone on to write those of n + 1 cannot overwrite what a
// slower lane is still to read, because operation n + 1 releases no lane
// before every lane has arrived at it, and a lane reads right after its
// release.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/emu/Emu.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace braid::cuda::emu {

thread_local uint3 threadIdx_;
thread_local uint3 blockIdx_;
thread_local dim3 blockDim_;
thread_local dim3 gridDim_;

namespace {

constexpr size_t kStackBytes = size_t(128) << 10;
constexpr int kMaxThreadsPerBlock = 1024;
constexpr size_t kDefaultSharedBytes = size_t(48) << 10;
constexpr size_t kMaxSharedBytes = size_t(227) << 10; // sm_90's opt-in limit

enum class State { kReady, kAtBlockBarrier, kAtWarpBarrier, kDone };

#if defined(__x86_64__)
/// A suspended fiber: its stack pointer, below its saved registers.
struct Context {
  void *sp = nullptr;
};
#else
using Context = ucontext_t;
#endif

/// A copy of cp.async: where, and the bytes it writes there.
struct AsyncCopy {
  void *dst;
  unsigned char bytes[16];
  int size;
};

struct Fiber {
  Context context;
  State state = State::kReady;
  uint3 index;
  unsigned mask = 0;   // of the warp-collective operation it waits at
  uint64_t collectives = 0;
  /// cp.async's copies not yet committed, and the committed groups not yet
  /// complete (oldest first).
  std::vector<AsyncCopy> openCopies;
  std::vector<std::vector<AsyncCopy>> copyGroups;
};

struct Block {
  std::vector<Fiber> fibers;
  /// The order the threads run in between barriers: by index, or reversed
  /// (BRAID_CUDA_EMULATION_ORDER=reverse), so that a kernel that reads
  /// what another thread wrote without a barrier between sees it missing in
  /// one order or the other.
  std::vector<int> order, position;
  /// Reversed also runs one warp at a time, each to the block's next
  /// barrier (runBlock), and lands cp.async's copies when they are issued.
  bool reverse = false;
  Context scheduler;
  int current = -1;
  const std::function<void()> *body = nullptr;
  std::vector<unsigned char> slots; // warp x bank x lane x kSlotBytes
  std::vector<unsigned char> shared;
};

thread_local Block *block_ = nullptr;

int laneCount(const Block &b, int warp) {
  return std::min<int>(32, int(b.fibers.size()) - 32 * warp);
}

unsigned char *slotsOf(Block &b, int warp, int bank) {
  return b.slots.data() + (size_t(warp) * 2 + size_t(bank)) * 32 * kSlotBytes;
}

Fiber &current() {
  if (!block_)
    fail("a device function was called outside a kernel launch");
  return block_->fibers[size_t(block_->current)];
}

#if defined(__x86_64__)
// Saves the callee-saved registers on this stack, stores its pointer in
// *save, and resumes the context whose stack pointer is `load` (System V
// ABI). The SSE and x87 control words are left alone: every fiber runs on
// the launching thread's, which kernels do not change.
extern "C" void braidEmuSwitch(void **save, void *load);
asm(R"(
  .text
  .p2align 4
  .type braidEmuSwitch, @function
braidEmuSwitch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size braidEmuSwitch, .-braidEmuSwitch
)");

void switchTo(Context &save, Context &load) {
  braidEmuSwitch(&save.sp, load.sp);
}
#else
void switchTo(Context &save, Context &load) { swapcontext(&save, &load); }
#endif

/// Leaves fiber `f` (its state set): straight to the next ready fiber in
/// the block's order, else back to the scheduler.
void leave(Fiber &f) {
  Block &b = *block_;
  for (size_t k = size_t(b.position[size_t(b.current)]) + 1; k < b.order.size();
       ++k) {
    const int i = b.order[k];
    if (b.reverse && i / 32 != b.current / 32)
      break; // one warp at a time (runBlock)
    if (b.fibers[size_t(i)].state == State::kReady) {
      b.current = i;
      threadIdx_ = b.fibers[size_t(i)].index;
      switchTo(f.context, b.fibers[size_t(i)].context);
      return;
    }
  }
  switchTo(f.context, b.scheduler);
}

void wait(State state) {
  Fiber &f = current();
  f.state = state;
  leave(f);
}

[[noreturn]] void fiberMain() {
  (*block_->body)();
  Fiber &f = block_->fibers[size_t(block_->current)];
  f.state = State::kDone;
  leave(f);
  fail("a finished thread was resumed");
}

/// Makes `f` start in fiberMain on the stack [stack, stack + bytes).
void startFiber(Fiber &f, char *stack, size_t bytes, Context &scheduler) {
#if defined(__x86_64__)
  // The frame braidEmuSwitch pops: six registers, and fiberMain as the
  // return address, placed so that fiberMain starts with the stack aligned
  // as after a call (rsp + 8 a multiple of 16).
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t(15);
  uint64_t *ret = reinterpret_cast<uint64_t *>(top - 16);
  *ret = reinterpret_cast<uint64_t>(&fiberMain);
  uint64_t *frame = ret - 6;
  std::memset(frame, 0, 6 * sizeof(uint64_t));
  f.context.sp = frame;
  (void)scheduler;
#else
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = stack;
  f.context.uc_stack.ss_size = bytes;
  f.context.uc_link = &scheduler;
  makecontext(&f.context, reinterpret_cast<void (*)()>(&fiberMain), 0);
#endif
}

/// Releases the lanes of warp `w` if every lane of its operation's mask
/// has reached it; true if they were.
bool releaseWarp(Block &b, int w) {
  {
    const int lanes = laneCount(b, w);
    Fiber *lanesOf = &b.fibers[size_t(w) * 32];
    int first = -1;
    for (int l = 0; l < lanes && first < 0; ++l)
      if (lanesOf[l].state == State::kAtWarpBarrier)
        first = l;
    if (first < 0)
      return false;
    const unsigned existing = lanes == 32 ? ~0u : (1u << lanes) - 1;
    const unsigned mask = lanesOf[first].mask & existing;
    if (!((mask >> first) & 1u))
      fail("a lane takes part in a warp-collective operation its mask "
           "leaves out");
    bool ready = true;
    for (int l = 0; l < lanes; ++l) {
      if (!((mask >> l) & 1u))
        continue;
      if (lanesOf[l].state == State::kDone)
        fail("a lane of a warp-collective operation's mask exited before "
             "reaching it");
      if (lanesOf[l].state != State::kAtWarpBarrier) {
        ready = false;
        continue;
      }
      if (lanesOf[l].mask != lanesOf[first].mask ||
          (lanesOf[l].collectives & 1) != (lanesOf[first].collectives & 1))
        fail("the lanes of a warp wait at different warp-collective "
             "operations (divergent shuffles or tensor-core products)");
    }
    if (!ready)
      return false;
    for (int l = 0; l < lanes; ++l)
      if ((mask >> l) & 1u)
        lanesOf[l].state = State::kReady;
    return true;
  }
}

/// Releases every warp releaseWarp can; true if any was.
bool releaseWarps(Block &b) {
  bool released = false;
  const int warps = (int(b.fibers.size()) + 31) / 32;
  for (int w = 0; w < warps; ++w)
    released |= releaseWarp(b, w);
  return released;
}

/// Runs the ready threads of warp `w` (in the block's order) until each
/// waits or ends; true if any ran.
bool runWarp(Block &b, int w) {
  bool ran = false;
  for (int i : b.order) {
    if (i / 32 != w || b.fibers[size_t(i)].state != State::kReady)
      continue;
    b.current = i;
    threadIdx_ = b.fibers[size_t(i)].index;
    switchTo(b.scheduler, b.fibers[size_t(i)].context);
    ran = true;
  }
  return ran;
}

void runBlock(Block &b) {
  const int warps = (int(b.fibers.size()) + 31) / 32;
  for (;;) {
    if (b.reverse) {
      // One warp at a time, the last first, each as far as it goes (to a
      // barrier of the block, or its end) before the next: a warp runs
      // ahead of the others, as a device may let it.
      bool progressed = false;
      for (int w = warps - 1; w >= 0 && !progressed; --w)
        progressed = runWarp(b, w) || releaseWarp(b, w);
      if (progressed)
        continue;
    } else {
      bool ran = false;
      for (int i : b.order) {
        if (b.fibers[size_t(i)].state != State::kReady)
          continue;
        b.current = i;
        threadIdx_ = b.fibers[size_t(i)].index;
        switchTo(b.scheduler, b.fibers[size_t(i)].context);
        ran = true;
      }
      if (ran)
        continue;
      if (releaseWarps(b))
        continue;
    }
    size_t atBarrier = 0, done = 0;
    for (const Fiber &f : b.fibers) {
      atBarrier += f.state == State::kAtBlockBarrier;
      done += f.state == State::kDone;
    }
    if (done == b.fibers.size())
      return;
    if (atBarrier + done == b.fibers.size()) {
      // Threads that exited count as arrived.
      for (Fiber &f : b.fibers)
        if (f.state == State::kAtBlockBarrier)
          f.state = State::kReady;
      continue;
    }
    b.current = -1;
    fail("a block's threads wait at different barriers (__syncthreads in "
         "divergent code, or a warp-collective operation some lanes never "
         "reach)");
  }
}

/// The fibers' stacks, kept from launch to launch on each host thread (a
/// fresh mapping a launch cost a page fault a thread, and the munmap):
/// grown to the largest block launched, never shrunk.
struct Stacks {
  void *base = nullptr;
  size_t bytes = 0;
  ~Stacks() {
    if (base)
      munmap(base, bytes);
  }
  /// At least `want` bytes; false when they cannot be mapped.
  bool reserve(size_t want) {
    if (want <= bytes)
      return true;
    if (base)
      munmap(base, bytes);
    base = mmap(nullptr, want, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
      base = nullptr;
      bytes = 0;
      return false;
    }
    bytes = want;
    return true;
  }
};
thread_local Stacks stacks_;

thread_local cudaError_t lastError_ = cudaSuccess;

std::mutex attributesMutex_;
std::map<const void *, int> maxDynamicShared_;

} // namespace

bool setMaxDynamicShared(const void *kernel, int bytes) {
  if (bytes < 0 || size_t(bytes) > kMaxSharedBytes)
    return false;
  std::lock_guard<std::mutex> lock(attributesMutex_);
  maxDynamicShared_[kernel] = bytes;
  return true;
}

void fail(const char *message) {
  if (block_ && block_->current >= 0)
    std::fprintf(stderr,
                 "CUDA emulation: %s (block %u,%u,%u thread %u,%u,%u)\n",
                 message, blockIdx_.x, blockIdx_.y, blockIdx_.z, threadIdx_.x,
                 threadIdx_.y, threadIdx_.z);
  else
    std::fprintf(stderr, "CUDA emulation: %s\n", message);
  std::fflush(stderr);
  std::abort();
}

namespace {
std::mutex streamsMutex_;
/// The streams created and not yet destroyed.
std::set<cudaStream_t> &liveStreams() {
  static std::set<cudaStream_t> streams;
  return streams;
}
} // namespace

/// A stream capture: the work recorded, in order, and for every stream in
/// it (the capturing one and those that joined) how many of the recorded
/// items were enqueued on it and how many of those a stream of the capture
/// has waited for (an unjoined stream ends the capture with an error).
struct Capture {
  cudaStream_t origin = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  std::vector<std::function<void()>> work;
  std::map<cudaStream_t, std::pair<size_t, size_t>> streams;
  cudaError_t invalidated = cudaSuccess;
};
struct Graph {
  std::vector<std::function<void()>> work;
};
std::mutex captureMutex_;
/// The streams in a capture, by stream.
std::map<cudaStream_t, std::shared_ptr<Capture>> &capturing() {
  static std::map<cudaStream_t, std::shared_ptr<Capture>> streams;
  return streams;
}

bool captured(cudaStream_t stream, std::function<void()> work) {
  std::lock_guard<std::mutex> lock(captureMutex_);
  auto it = capturing().find(stream);
  if (it == capturing().end())
    return false;
  it->second->work.push_back(std::move(work));
  it->second->streams[stream].first++;
  return true;
}

/// Whether the running thread may not make a synchronous call now: a
/// capture is open that forbids it (a global one, or this thread's);
/// invalidates such captures with `error`.
bool captureForbids(cudaError_t error) {
  std::lock_guard<std::mutex> lock(captureMutex_);
  bool forbidden = false;
  for (auto &[stream, c] : capturing())
    if (c->mode == cudaStreamCaptureModeGlobal ||
        (c->mode == cudaStreamCaptureModeThreadLocal &&
         c->thread == std::this_thread::get_id())) {
      forbidden = true;
      if (c->invalidated == cudaSuccess)
        c->invalidated = error;
    }
  return forbidden;
}

void checkStream(cudaStream_t stream, const char *call) {
  if (stream == nullptr || stream == cudaStreamLegacy ||
      stream == cudaStreamPerThread)
    return;
  std::lock_guard<std::mutex> lock(streamsMutex_);
  if (liveStreams().count(stream))
    return;
  std::string message =
      std::string(call) + " on a stream that was destroyed (or never created)";
  fail(message.c_str());
}

void syncThreads() { wait(State::kAtBlockBarrier); }

void syncWarp(unsigned mask) {
  Fiber &f = current();
  f.mask = mask;
  ++f.collectives;
  wait(State::kAtWarpBarrier);
}

const unsigned char *exchange(unsigned mask, const void *value,
                              size_t bytes) {
  if (bytes > kSlotBytes)
    fail("a warp-collective operation's value is too large");
  Fiber &f = current();
  const int t = block_->current;
  const int bank = int(f.collectives & 1);
  unsigned char *slots = slotsOf(*block_, t / 32, bank);
  std::memcpy(slots + size_t(t % 32) * kSlotBytes, value, bytes);
  f.mask = mask;
  ++f.collectives;
  wait(State::kAtWarpBarrier);
  return slots;
}

void cpAsync(void *dst, const void *src, int bytes, int srcBytes) {
  Fiber &f = current();
  if (bytes != 4 && bytes != 8 && bytes != 16)
    fail("cp.async copies 4, 8 or 16 bytes");
  if (srcBytes < 0 || srcBytes > bytes)
    fail("cp.async's source size is not within its copy size");
  auto *d = static_cast<unsigned char *>(dst);
  if (block_->shared.empty() || d < block_->shared.data() ||
      d + bytes > block_->shared.data() + block_->shared.size())
    fail("cp.async to memory outside the block's dynamic shared memory");
  if (reinterpret_cast<uintptr_t>(dst) % unsigned(bytes) != 0 ||
      (srcBytes > 0 && reinterpret_cast<uintptr_t>(src) % unsigned(bytes) != 0))
    fail("cp.async with an address not aligned to its size");
  AsyncCopy copy{dst, {}, bytes};
  if (srcBytes > 0)
    std::memcpy(copy.bytes, src, size_t(srcBytes));
  if (block_->reverse) {
    std::memcpy(dst, copy.bytes, size_t(bytes));
    copy.size = 0; // landed: its wait only completes it
  }
  f.openCopies.push_back(copy);
}

void cpAsyncCommit() {
  Fiber &f = current();
  f.copyGroups.push_back(std::move(f.openCopies));
  f.openCopies.clear();
}

void cpAsyncWait(int pending) {
  Fiber &f = current();
  while (f.copyGroups.size() > size_t(std::max(pending, 0))) {
    for (const AsyncCopy &copy : f.copyGroups.front())
      std::memcpy(copy.dst, copy.bytes, size_t(copy.size));
    f.copyGroups.erase(f.copyGroups.begin());
  }
}

int lane() {
  current();
  return block_->current % 32;
}

int warpLanes() {
  current();
  return laneCount(*block_, block_->current / 32);
}

void *dynamicShared() {
  current();
  return block_->shared.empty() ? nullptr : block_->shared.data();
}

namespace {

/// Element `high` (0: the lower 16 bits) of a register of two bf16 or fp16.
float elementAt(uint32_t reg, int high, bool f16) {
  const uint16_t bits = uint16_t(high ? reg >> 16 : reg & 0xffffu);
  return f16 ? __half2float(__ushort_as_half(bits))
             : __bfloat162float(__ushort_as_bfloat16(bits));
}

uint32_t regAt(const unsigned char *slots, int lane, int index) {
  uint32_t r;
  std::memcpy(&r, slots + size_t(lane) * kSlotBytes + 4 * size_t(index),
              sizeof(r));
  return r;
}

} // namespace

void mmaM16N8K16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                 uint32_t b1, bool f16) {
  if (warpLanes() != 32)
    fail("mma.sync needs a whole warp");
  uint32_t mine[6] = {a[0], a[1], a[2], a[3], b0, b1};
  const unsigned char *slots = exchange(~0u, mine, sizeof(mine));
  // A[row][k] and B[k][col] from the lanes that hold them.
  auto aAt = [&](int row, int k) {
    const int lane = (row % 8) * 4 + (k % 8) / 2;
    const int reg = (row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0);
    return elementAt(regAt(slots, lane, reg), k % 2, f16);
  };
  auto bAt = [&](int k, int col) {
    const int lane = col * 4 + (k % 8) / 2;
    return elementAt(regAt(slots, lane, 4 + (k >= 8 ? 1 : 0)), k % 2, f16);
  };
  const int l = lane(), g = l / 4, t = l % 4;
  for (int e = 0; e < 4; ++e) {
    const int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
    float sum = c[e];
    for (int k = 0; k < 16; ++k)
      sum += aAt(row, k) * bAt(k, col);
    c[e] = sum;
  }
}

void ldmatrix(uint32_t *r, int count, const void *row, bool trans) {
  if (warpLanes() != 32)
    fail("ldmatrix needs a whole warp");
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0)
    fail("ldmatrix: a row address that is not 16-byte aligned");
  const unsigned char *slots = exchange(~0u, &row, sizeof(row));
  auto rowOf = [&](int matrix, int r8) {
    const void *p;
    std::memcpy(&p, slots + size_t(matrix * 8 + r8) * kSlotBytes, sizeof(p));
    return static_cast<const uint16_t *>(p);
  };
  const int l = lane(), g = l / 4, t = l % 4;
  for (int i = 0; i < count; ++i) {
    uint16_t lo, hi;
    if (trans) {
      lo = rowOf(i, 2 * t)[g];
      hi = rowOf(i, 2 * t + 1)[g];
    } else {
      lo = rowOf(i, g)[2 * t];
      hi = rowOf(i, g)[2 * t + 1];
    }
    r[i] = uint32_t(lo) | (uint32_t(hi) << 16);
  }
}

namespace {
/// Checks a launch's configuration as a device does; a failure becomes the
/// last error.
bool launchable(const LaunchConfig &config) {
  if (block_)
    fail("a kernel launched from device code (dynamic parallelism)");
  const dim3 g = config.grid, bd = config.block;
  const uint64_t threads = uint64_t(bd.x) * bd.y * bd.z;
  if (threads == 0 || threads > kMaxThreadsPerBlock || bd.z > 64 ||
      g.x == 0 || g.y == 0 || g.z == 0 || g.x > 0x7fffffffu ||
      g.y > 65535 || g.z > 65535) {
    lastError_ = cudaErrorInvalidConfiguration;
    return false;
  }
  size_t sharedLimit = kDefaultSharedBytes;
  {
    std::lock_guard<std::mutex> lock(attributesMutex_);
    if (auto it = maxDynamicShared_.find(config.kernel);
        it != maxDynamicShared_.end())
      sharedLimit = size_t(it->second);
  }
  if (config.sharedBytes > sharedLimit) {
    lastError_ = cudaErrorInvalidValue;
    return false;
  }
  return true;
}
} // namespace

bool capturedLaunch(cudaStream_t stream, const LaunchConfig &config,
                    std::function<void()> body) {
  {
    std::lock_guard<std::mutex> lock(captureMutex_);
    if (!capturing().count(stream))
      return false;
  }
  if (launchable(config))
    captured(stream,
             [config, body = std::move(body)] { runGrid(config, body); });
  return true;
}

void runGrid(const LaunchConfig &config, const std::function<void()> &body) {
  if (!launchable(config))
    return;
  const dim3 g = config.grid, bd = config.block;
  const uint64_t threads = uint64_t(bd.x) * bd.y * bd.z;

  if (!stacks_.reserve(size_t(threads) * kStackBytes)) {
    lastError_ = cudaErrorMemoryAllocation;
    return;
  }
  Block b;
  b.fibers.resize(size_t(threads));
  b.order.resize(size_t(threads));
  b.position.resize(size_t(threads));
  static const bool reverse = [] {
    const char *order = std::getenv("BRAID_CUDA_EMULATION_ORDER");
    return order && std::string(order) == "reverse";
  }();
  b.reverse = reverse;
  for (size_t k = 0; k < size_t(threads); ++k) {
    const int i = reverse ? int(threads - 1 - k) : int(k);
    b.order[k] = i;
    b.position[size_t(i)] = int(k);
  }
  b.body = &body;
  b.slots.assign(size_t((threads + 31) / 32) * 2 * 32 * kSlotBytes, 0);
  b.shared.assign(config.sharedBytes, 0);
  gridDim_ = g;
  blockDim_ = bd;
  block_ = &b;
  for (unsigned z = 0; z < g.z; ++z)
    for (unsigned y = 0; y < g.y; ++y)
      for (unsigned x = 0; x < g.x; ++x) {
        blockIdx_ = uint3{x, y, z};
        // Shared memory starts undefined on a device; a pattern that is
        // neither zero nor a small number makes reads before writes show.
        std::fill(b.shared.begin(), b.shared.end(), 0xa5);
        size_t i = 0;
        for (unsigned tz = 0; tz < bd.z; ++tz)
          for (unsigned ty = 0; ty < bd.y; ++ty)
            for (unsigned tx = 0; tx < bd.x; ++tx, ++i) {
              Fiber &f = b.fibers[i];
              f.state = State::kReady;
              f.index = uint3{tx, ty, tz};
              f.mask = 0;
              f.collectives = 0;
              f.openCopies.clear();
              f.copyGroups.clear();
              startFiber(f, static_cast<char *>(stacks_.base) + i * kStackBytes,
                         kStackBytes, b.scheduler);
            }
        runBlock(b);
        for (size_t t = 0; t < b.fibers.size(); ++t)
          if (!b.fibers[t].openCopies.empty() ||
              std::any_of(b.fibers[t].copyGroups.begin(),
                          b.fibers[t].copyGroups.end(),
                          [](const auto &group) { return !group.empty(); })) {
            b.current = int(t);
            threadIdx_ = b.fibers[t].index;
            fail("a thread ended with cp.async copies it never waited for");
          }
      }
  block_ = nullptr;
}

} // namespace braid::cuda::emu

//===----------------------------------------------------------------------===//
// The runtime API's subset (cuda_runtime_api.h's declarations).
//===----------------------------------------------------------------------===//

using braid::cuda::emu::lastError_;

namespace {

cudaError_t record(cudaError_t e) {
  if (e != cudaSuccess)
    lastError_ = e;
  return e;
}

struct EmuEvent {
  double seconds = -1;
  /// The capture it was last recorded in, on which stream, after how many
  /// of that stream's recorded items (null when recorded outside one).
  std::shared_ptr<braid::cuda::emu::Capture> capture;
  cudaStream_t stream = nullptr;
  size_t count = 0;
};

/// The emulated device's memory: its capacity (BRAID_CUDA_EMULATION_MEMORY
/// bytes, read at each allocation; 80 GiB, an H100's, by default) and what
/// cudaMalloc has handed out.
std::mutex memoryMutex_;
std::map<void *, size_t> allocations_;
size_t allocated_ = 0;

size_t capacity() {
  const char *bytes = std::getenv("BRAID_CUDA_EMULATION_MEMORY");
  if (bytes && *bytes) {
    char *end = nullptr;
    unsigned long long v = std::strtoull(bytes, &end, 10);
    if (end && !*end)
      return size_t(v);
  }
  return size_t(80) << 30;
}

double now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

} // namespace

namespace {

/// The devices of the emulated node: BRAID_CUDA_EMULATION_DEVICES, 8 by
/// default (a node's GPUs, so that the ranks of a job on this machine each
/// select one, as on a GPU node); the one this process has selected.
int deviceCount() {
  static const int count = [] {
    const char *v = std::getenv("BRAID_CUDA_EMULATION_DEVICES");
    int n = v ? std::atoi(v) : 8;
    return n > 0 ? n : 8;
  }();
  return count;
}
int currentDevice_ = 0;

} // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int *count) {
  if (!count)
    return record(cudaErrorInvalidValue);
  *count = deviceCount();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
  if (!prop)
    return record(cudaErrorInvalidValue);
  if (device < 0 || device >= deviceCount())
    return record(cudaErrorInvalidDevice);
  // The name only (and the capability of the Hopper GPUs the device code
  // is built for): nothing else of a device is emulated.
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "CUDA emulation (device %d)",
                device);
  prop->major = 9;
  prop->minor = 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= deviceCount())
    return record(cudaErrorInvalidDevice);
  currentDevice_ = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  if (!device)
    return record(cudaErrorInvalidValue);
  *device = currentDevice_;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  if (braid::cuda::emu::captureForbids(cudaErrorStreamCaptureUnsupported))
    return record(cudaErrorStreamCaptureUnsupported);
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = lastError_;
  lastError_ = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return lastError_; }

const char *cudaGetErrorName(cudaError_t error) {
  switch (error) {
  case cudaSuccess:
    return "cudaSuccess";
  case cudaErrorInvalidValue:
    return "cudaErrorInvalidValue";
  case cudaErrorMemoryAllocation:
    return "cudaErrorMemoryAllocation";
  case cudaErrorInvalidConfiguration:
    return "cudaErrorInvalidConfiguration";
  case cudaErrorInvalidDevice:
    return "cudaErrorInvalidDevice";
  case cudaErrorInvalidResourceHandle:
    return "cudaErrorInvalidResourceHandle";
  case cudaErrorInvalidPitchValue:
    return "cudaErrorInvalidPitchValue";
  default:
    return "cudaErrorUnknown";
  }
}

const char *cudaGetErrorString(cudaError_t error) {
  switch (error) {
  case cudaSuccess:
    return "no error";
  case cudaErrorInvalidValue:
    return "invalid argument";
  case cudaErrorMemoryAllocation:
    return "out of memory";
  case cudaErrorInvalidConfiguration:
    return "invalid configuration argument";
  case cudaErrorInvalidDevice:
    return "invalid device ordinal";
  case cudaErrorInvalidResourceHandle:
    return "invalid resource handle";
  case cudaErrorInvalidPitchValue:
    return "invalid pitch argument";
  default:
    return "unknown error";
  }
}

cudaError_t cudaMalloc(void **devPtr, size_t size) {
  if (!devPtr)
    return record(cudaErrorInvalidValue);
  const size_t rounded = std::max<size_t>(256, (size + 255) / 256 * 256);
  std::lock_guard<std::mutex> lock(memoryMutex_);
  if (allocated_ + rounded > capacity())
    return record(cudaErrorMemoryAllocation);
  // 256-byte aligned, as cudaMalloc's allocations are.
  void *p = std::aligned_alloc(256, rounded);
  if (!p)
    return record(cudaErrorMemoryAllocation);
  allocations_[p] = rounded;
  allocated_ += rounded;
  // Device memory starts undefined: all ones (NaN as floats) makes a read
  // before any write show.
  std::memset(p, 0xff, size);
  *devPtr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void *devPtr) {
  if (!devPtr)
    return cudaSuccess;
  std::lock_guard<std::mutex> lock(memoryMutex_);
  auto it = allocations_.find(devPtr);
  if (it == allocations_.end())
    return record(cudaErrorInvalidValue);
  allocated_ -= it->second;
  allocations_.erase(it);
  std::free(devPtr);
  return cudaSuccess;
}

/// Pinned host memory: host memory the emulated runtime handed out (and
/// refuses to free twice).
static std::set<void *> pinned_;

cudaError_t cudaMallocHost(void **ptr, size_t size) {
  if (!ptr)
    return record(cudaErrorInvalidValue);
  void *p =
      std::aligned_alloc(256, std::max<size_t>(256, (size + 255) / 256 * 256));
  if (!p)
    return record(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(memoryMutex_);
  pinned_.insert(p);
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr) {
  if (!ptr)
    return cudaSuccess;
  std::lock_guard<std::mutex> lock(memoryMutex_);
  if (!pinned_.erase(ptr))
    return record(cudaErrorInvalidValue);
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes,
                                     const void *ptr) {
  if (!attributes)
    return record(cudaErrorInvalidValue);
  std::memset(attributes, 0, sizeof(*attributes));
  // Device memory is what cudaMalloc gave (and has not been freed): the
  // allocation whose range holds `ptr`. Anything else is host memory that
  // CUDA does not know (unregistered), as a stack or heap pointer is.
  std::lock_guard<std::mutex> lock(memoryMutex_);
  auto it = allocations_.upper_bound(const_cast<void *>(ptr));
  bool device = false;
  if (it != allocations_.begin()) {
    --it;
    const char *base = static_cast<const char *>(it->first);
    device = static_cast<const char *>(ptr) < base + it->second;
  }
  attributes->type = device ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
  attributes->device = device ? currentDevice_ : -2;
  attributes->devicePointer = device ? const_cast<void *>(ptr) : nullptr;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free, size_t *total) {
  if (!free || !total)
    return record(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(memoryMutex_);
  *total = capacity();
  *free = *total > allocated_ ? *total - allocated_ : 0;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                       enum cudaMemcpyKind) {
  if (count && (!dst || !src))
    return record(cudaErrorInvalidValue);
  // Synchronous, on the legacy stream: not while a capture forbids it.
  if (braid::cuda::emu::captureForbids(cudaErrorStreamCaptureImplicit))
    return record(cudaErrorStreamCaptureImplicit);
  if (count)
    std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            enum cudaMemcpyKind, cudaStream_t stream) {
  braid::cuda::emu::checkStream(stream, "cudaMemcpyAsync");
  if (count && (!dst || !src))
    return record(cudaErrorInvalidValue);
  auto copy = [dst, src, count] {
    if (count)
      std::memmove(dst, src, count);
  };
  braid::cuda::emu::runOrRecord(stream, copy);
  return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src,
                              size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind, cudaStream_t stream) {
  braid::cuda::emu::checkStream(stream, "cudaMemcpy2DAsync");
  // As CUDA: a row wider than either pitch is an error.
  if (width > dpitch || width > spitch)
    return record(cudaErrorInvalidPitchValue);
  if (width && height && (!dst || !src))
    return record(cudaErrorInvalidValue);
  auto copy = [=] {
    for (size_t r = 0; r < height && width; ++r)
      std::memmove(static_cast<char *>(dst) + r * dpitch,
                   static_cast<const char *>(src) + r * spitch, width);
  };
  braid::cuda::emu::runOrRecord(stream, copy);
  return cudaSuccess;
}

cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src,
                         size_t spitch, size_t width, size_t height,
                         enum cudaMemcpyKind kind) {
  if (braid::cuda::emu::captureForbids(cudaErrorStreamCaptureImplicit))
    return record(cudaErrorStreamCaptureImplicit);
  return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, kind,
                           nullptr);
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count,
                            cudaStream_t stream) {
  braid::cuda::emu::checkStream(stream, "cudaMemsetAsync");
  if (count && !devPtr)
    return record(cudaErrorInvalidValue);
  auto set = [devPtr, value, count] {
    if (count)
      std::memset(devPtr, value, count);
  };
  braid::cuda::emu::runOrRecord(stream, set);
  return cudaSuccess;
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
  if (braid::cuda::emu::captureForbids(cudaErrorStreamCaptureImplicit))
    return record(cudaErrorStreamCaptureImplicit);
  return cudaMemsetAsync(devPtr, value, count, nullptr);
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) {
  if (!stream)
    return record(cudaErrorInvalidValue);
  *stream = reinterpret_cast<cudaStream_t>(new char);
  std::lock_guard<std::mutex> lock(braid::cuda::emu::streamsMutex_);
  braid::cuda::emu::liveStreams().insert(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int) {
  return cudaStreamCreate(stream);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  braid::cuda::emu::checkStream(stream, "cudaStreamDestroy");
  {
    std::lock_guard<std::mutex> lock(braid::cuda::emu::streamsMutex_);
    braid::cuda::emu::liveStreams().erase(stream);
  }
  delete reinterpret_cast<char *>(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  braid::cuda::emu::checkStream(stream, "cudaStreamSynchronize");
  using braid::cuda::emu::capturing;
  std::lock_guard<std::mutex> lock(braid::cuda::emu::captureMutex_);
  if (auto it = capturing().find(stream); it != capturing().end()) {
    if (it->second->invalidated == cudaSuccess)
      it->second->invalidated = cudaErrorStreamCaptureUnsupported;
    return record(cudaErrorStreamCaptureUnsupported);
  }
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                unsigned int) {
  braid::cuda::emu::checkStream(stream, "cudaStreamWaitEvent");
  if (!event)
    return record(cudaErrorInvalidResourceHandle);
  using braid::cuda::emu::capturing;
  EmuEvent &e = *reinterpret_cast<EmuEvent *>(event);
  std::lock_guard<std::mutex> lock(braid::cuda::emu::captureMutex_);
  auto open = capturing().find(e.stream);
  const bool inCapture =
      e.capture && open != capturing().end() && open->second == e.capture;
  auto waiting = capturing().find(stream);
  if (!inCapture) {
    // A capturing stream may not wait for work outside its capture.
    if (waiting != capturing().end()) {
      if (waiting->second->invalidated == cudaSuccess)
        waiting->second->invalidated = cudaErrorStreamCaptureIsolation;
      return record(cudaErrorStreamCaptureIsolation);
    }
    return cudaSuccess;
  }
  if (waiting != capturing().end() && waiting->second != e.capture)
    return record(cudaErrorStreamCaptureMerge);
  // The waiting stream joins the capture; the event's stream is joined as
  // far as the event.
  capturing()[stream] = e.capture;
  e.capture->streams[stream];
  size_t &joined = e.capture->streams[e.stream].second;
  joined = std::max(joined, e.count);
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream,
                                   enum cudaStreamCaptureMode mode) {
  braid::cuda::emu::checkStream(stream, "cudaStreamBeginCapture");
  if (stream == nullptr || stream == cudaStreamLegacy ||
      stream == cudaStreamPerThread)
    return record(cudaErrorStreamCaptureUnsupported);
  using braid::cuda::emu::capturing;
  std::lock_guard<std::mutex> lock(braid::cuda::emu::captureMutex_);
  if (capturing().count(stream))
    return record(cudaErrorIllegalState);
  auto c = std::make_shared<braid::cuda::emu::Capture>();
  c->origin = stream;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->streams[stream];
  capturing()[stream] = c;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
  braid::cuda::emu::checkStream(stream, "cudaStreamEndCapture");
  if (!graph)
    return record(cudaErrorInvalidValue);
  *graph = nullptr;
  using braid::cuda::emu::capturing;
  std::lock_guard<std::mutex> lock(braid::cuda::emu::captureMutex_);
  auto it = capturing().find(stream);
  if (it == capturing().end())
    return record(cudaErrorIllegalState);
  std::shared_ptr<braid::cuda::emu::Capture> c = it->second;
  if (c->origin != stream)
    return record(cudaErrorStreamCaptureUnmatched);
  for (auto s = capturing().begin(); s != capturing().end();)
    s = s->second == c ? capturing().erase(s) : std::next(s);
  if (c->invalidated != cudaSuccess)
    return record(cudaErrorStreamCaptureInvalidated);
  for (const auto &[s, counts] : c->streams)
    if (s != stream && counts.first > counts.second)
      return record(cudaErrorStreamCaptureUnjoined);
  *graph = reinterpret_cast<cudaGraph_t>(
      new braid::cuda::emu::Graph{std::move(c->work)});
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream,
                                  enum cudaStreamCaptureStatus *status) {
  braid::cuda::emu::checkStream(stream, "cudaStreamIsCapturing");
  if (!status)
    return record(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(braid::cuda::emu::captureMutex_);
  auto it = braid::cuda::emu::capturing().find(stream);
  *status = it == braid::cuda::emu::capturing().end()
                ? cudaStreamCaptureStatusNone
            : it->second->invalidated != cudaSuccess
                ? cudaStreamCaptureStatusInvalidated
                : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long) {
  if (!exec || !graph)
    return record(cudaErrorInvalidValue);
  *exec = reinterpret_cast<cudaGraphExec_t>(new braid::cuda::emu::Graph(
      *reinterpret_cast<braid::cuda::emu::Graph *>(graph)));
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  braid::cuda::emu::checkStream(stream, "cudaGraphLaunch");
  if (!exec)
    return record(cudaErrorInvalidResourceHandle);
  const braid::cuda::emu::Graph *g =
      reinterpret_cast<const braid::cuda::emu::Graph *>(exec);
  auto run = [g] {
    for (const std::function<void()> &work : g->work)
      work();
  };
  braid::cuda::emu::runOrRecord(stream, run);
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete reinterpret_cast<braid::cuda::emu::Graph *>(exec);
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete reinterpret_cast<braid::cuda::emu::Graph *>(graph);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
  if (!event)
    return record(cudaErrorInvalidValue);
  *event = reinterpret_cast<cudaEvent_t>(new EmuEvent);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int) {
  return cudaEventCreate(event);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<EmuEvent *>(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  braid::cuda::emu::checkStream(stream, "cudaEventRecord");
  if (!event)
    return record(cudaErrorInvalidResourceHandle);
  EmuEvent *e = reinterpret_cast<EmuEvent *>(event);
  {
    using braid::cuda::emu::capturing;
    std::lock_guard<std::mutex> lock(braid::cuda::emu::captureMutex_);
    auto it = capturing().find(stream);
    if (it != capturing().end()) {
      // Recorded in the capture: it completes when the graph runs there.
      e->capture = it->second;
      e->stream = stream;
      e->count = it->second->streams[stream].first;
      it->second->work.push_back([e] { e->seconds = now(); });
      return cudaSuccess;
    }
  }
  e->capture.reset();
  e->seconds = now();
  return cudaSuccess;
}

/// Whether `event` was recorded in a capture still open.
bool recordedInOpenCapture(const EmuEvent &e) {
  std::lock_guard<std::mutex> lock(braid::cuda::emu::captureMutex_);
  auto it = braid::cuda::emu::capturing().find(e.stream);
  return e.capture && it != braid::cuda::emu::capturing().end() &&
         it->second == e.capture;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event)
    return record(cudaErrorInvalidResourceHandle);
  if (recordedInOpenCapture(*reinterpret_cast<EmuEvent *>(event)))
    return record(cudaErrorStreamCaptureUnsupported);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event)
    return record(cudaErrorInvalidResourceHandle);
  if (recordedInOpenCapture(*reinterpret_cast<EmuEvent *>(event)))
    return record(cudaErrorStreamCaptureUnsupported);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start,
                                 cudaEvent_t end) {
  if (!ms || !start || !end)
    return record(cudaErrorInvalidValue);
  const double a = reinterpret_cast<EmuEvent *>(start)->seconds;
  const double b = reinterpret_cast<EmuEvent *>(end)->seconds;
  if (a < 0 || b < 0)
    return record(cudaErrorInvalidResourceHandle);
  *ms = float((b - a) * 1e3);
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *func,
                                 enum cudaFuncAttribute attr, int value) {
  if (!func)
    return record(cudaErrorInvalidValue);
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize &&
      !braid::cuda::emu::setMaxDynamicShared(func, value))
    return record(cudaErrorInvalidValue);
  return cudaSuccess;
}

} // extern "C"
