//===- KernelRegistryTest.cpp - Kernels.def against plan.proto ------------===//
//
// KernelRegistry.cpp asserts at build time that every row's number is its
// name's in plan.proto; these tests check the other direction and the
// table's own consistency, against plan.proto's descriptor (not the table).
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/KernelRegistry.h"

#include "google/protobuf/descriptor.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace braid::plan {
namespace {

TEST(KernelRegistry, EveryEnumValueHasOneRow) {
  const google::protobuf::EnumDescriptor *e = Kernel_descriptor();
  int kernels = 0;
  for (int i = 0; i < e->value_count(); ++i) {
    const google::protobuf::EnumValueDescriptor *v = e->value(i);
    if (v->number() == KERNEL_UNSPECIFIED) {
      EXPECT_EQ(FindKernel(Kernel(v->number())), nullptr);
      continue;
    }
    ++kernels;
    const KernelInfo *info = FindKernel(Kernel(v->number()));
    ASSERT_NE(info, nullptr) << v->name() << " has no row in Kernels.def";
    EXPECT_EQ(info->name, v->name());
    EXPECT_EQ(FindKernel(v->name()), info);
    EXPECT_EQ(&KernelAt(KernelIndex(info->kernel)), info);
  }
  EXPECT_EQ(kernels, KernelCount());
}

TEST(KernelRegistry, UnknownKernelsHaveNoRow) {
  EXPECT_EQ(FindKernel(Kernel(Kernel_MAX + 1)), nullptr);
  EXPECT_EQ(FindKernel(Kernel(-1)), nullptr);
  EXPECT_EQ(FindKernel("LINEARR"), nullptr);
  EXPECT_EQ(FindKernel("linear"), nullptr);
  EXPECT_FALSE(IsCommunication(Kernel(Kernel_MAX + 1)));
}

TEST(KernelRegistry, OperandCountsAreRanges) {
  for (int i = 0; i < KernelCount(); ++i) {
    const KernelInfo &k = KernelAt(i);
    SCOPED_TRACE(k.name);
    EXPECT_GE(k.minInputs, 0);
    EXPECT_LE(k.minInputs, k.maxInputs);
    EXPECT_GE(k.minOutputs, 0);
    EXPECT_LE(k.minOutputs, k.maxOutputs);
    // An accumulated output is one the kernel has.
    for (int o = 0; o < 32; ++o)
      if (AccumulatesOutput(k.kernel, o))
        EXPECT_LT(o, k.maxOutputs);
  }
}

// The kinds, as plan.proto's comments define them (listed by hand here).
TEST(KernelRegistry, Kinds) {
  std::set<Kernel> communication, collectives, gemm, gradients, accumulating;
  for (int i = 0; i < KernelCount(); ++i) {
    Kernel k = KernelAt(i).kernel;
    if (IsCommunication(k))
      communication.insert(k);
    if (IsCollective(k))
      collectives.insert(k);
    if (IsMatmul(k))
      gemm.insert(k);
    if (IsGradient(k))
      gradients.insert(k);
    if (AccumulatesOutput(k, 0) || AccumulatesOutput(k, 1) ||
        AccumulatesOutput(k, 2))
      accumulating.insert(k);
  }
  EXPECT_EQ(communication, (std::set<Kernel>{ALL_REDUCE, ALL_GATHER,
                                             REDUCE_SCATTER, SEND, RECV}));
  EXPECT_EQ(collectives,
            (std::set<Kernel>{ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER}));
  EXPECT_EQ(gemm, (std::set<Kernel>{LINEAR, LINEAR_GRAD_INPUT,
                                    LINEAR_GRAD_WEIGHT}));
  EXPECT_EQ(gradients,
            (std::set<Kernel>{EMBEDDING_GRAD, POSITION_EMBEDDING_GRAD,
                              LINEAR_GRAD_INPUT, LINEAR_GRAD_WEIGHT, BIAS_GRAD,
                              RMS_NORM_GRAD, LAYER_NORM_GRAD, ROPE_GRAD,
                              ATTENTION_GRAD, SWIGLU_GRAD, GELU_GRAD,
                              CROSS_ENTROPY_GRAD}));
  EXPECT_EQ(accumulating,
            (std::set<Kernel>{EMBEDDING_GRAD, POSITION_EMBEDDING_GRAD,
                              LINEAR_GRAD_WEIGHT, BIAS_GRAD, RMS_NORM_GRAD,
                              LAYER_NORM_GRAD}));
  // RMSNorm's and LayerNorm's dx is written; their weight (and bias)
  // gradients are summed into.
  EXPECT_FALSE(AccumulatesOutput(RMS_NORM_GRAD, 0));
  EXPECT_TRUE(AccumulatesOutput(RMS_NORM_GRAD, 1));
  EXPECT_TRUE(AccumulatesOutput(LAYER_NORM_GRAD, 2));
}

TEST(KernelRegistry, CommunicationTime) {
  Instruction inst;
  inst.set_kernel(WAIT);
  EXPECT_TRUE(IsCommunicationTime(inst));
  EXPECT_FALSE(IsCommunication(WAIT));
  inst.set_kernel(GRAD_NORM);
  EXPECT_FALSE(IsCommunicationTime(inst));
  inst.add_group("tp");
  EXPECT_TRUE(IsCommunicationTime(inst));
  inst.set_kernel(LINEAR);
  EXPECT_FALSE(IsCommunicationTime(inst));
  inst.set_kernel(RECV);
  EXPECT_TRUE(IsCommunicationTime(inst));
  EXPECT_TRUE(IsPointToPoint(RECV));
}

} // namespace
} // namespace braid::plan
