//===- ModelCheckTest.cpp - Loads checked against the plan's model --------===//
//
// The trainer's loads (--load, --init-from of a Braid checkpoint) compare the
// model a checkpoint records with the plan's (Training.model_spec), and
// --allow-model-change names what may differ. The plans are the hand-written
// tiny model of PipelinePlans.h, carrying hand-written model specs (the
// check compares the specs; the tensors stay the same, as in the issue's
// tiny-llama with 8 heads of 8).
//
//===----------------------------------------------------------------------===//

#include "PipelinePlans.h"

#include "runtime/exec/Trainer.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include <cstdlib>
#include <functional>
#include <set>
#include <sstream>
#include <string>

namespace braid {
namespace {

/// tiny-llama's model, every field set, with `heads`, `kvHeads`, `theta`,
/// `eps` and `dropout` as given.
std::string llamaSpec(int heads = 4, int kvHeads = 2,
                      const std::string &theta = "10000",
                      const std::string &eps = "1e-05",
                      const std::string &dropout = "0") {
  return absl::StrCat(
      "family: LLAMA num_layers: 2 hidden_size: 64 num_heads: ", heads,
      " num_kv_heads: ", kvHeads,
      " ffn_hidden_size: 176 vocab_size: 512 make_vocab_size_divisible_by: 1 "
      "max_seq_len: 128 norm: RMS_NORM norm_eps: ",
      eps,
      " activation: SWIGLU position_embedding: ROPE rope_theta: ", theta,
      " tie_embeddings: false attention_bias: false mlp_bias: false "
      "embedding_norm: false init_std: 0.02 hidden_dropout: ",
      dropout, " attention_dropout: 0 embedding_dropout: 0 fuse_mlp: false\n");
}

std::string freshDir(const std::string &name) {
  std::string dir = ::testing::TempDir() + "/braid-model-check-" + name;
  std::string command = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  EXPECT_EQ(std::system(command.c_str()), 0);
  return dir;
}

class ModelCheck : public ::testing::Test {
protected:
  void SetUp() override {
    dir_ = freshDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(exec_test::writeTinyDataset(dir_ + "/data", model_.vocab).ok());
  }

  /// The tiny plan, recording `spec` as its model.
  plan::Plan planOf(const std::string &spec) {
    plan::Plan p = exec_test::tinySerialPlan(model_);
    p.mutable_training()->set_model_spec(spec);
    return p;
  }

  /// Trains `plan` for `steps` with `configure` applied to the options;
  /// the log is kept in log_.
  absl::Status train(const plan::Plan &plan, int64_t steps,
                     const std::function<void(exec::TrainerOptions &)> &configure) {
    exec::TrainerOptions options;
    options.dataPrefix = dir_ + "/data";
    options.steps = steps;
    std::ostringstream log;
    options.log = &log;
    configure(options);
    absl::Status s = exec::Train(plan, options);
    log_ = log.str();
    return s;
  }

  /// A checkpoint of one step of the tiny plan recording `spec`.
  std::string saved(const std::string &spec) {
    std::string root = dir_ + "/ckpt";
    absl::Status s = train(planOf(spec), 1, [&](exec::TrainerOptions &o) {
      o.save = root;
    });
    EXPECT_TRUE(s.ok()) << s;
    return root;
  }

  exec_test::TinyModel model_;
  std::string dir_, log_;
};

// The command: a checkpoint of the 4-head model resumed by the plan
// with 8 heads, 4 kv heads and theta 500000 (same tensors) is refused, each
// field named with both values; so is --init-from of it.
TEST_F(ModelCheck, LoadRefusesAnotherModel) {
  std::string root = saved(llamaSpec());
  plan::Plan other = planOf(llamaSpec(8, 4, "500000"));
  absl::Status s = train(other, 2, [&](exec::TrainerOptions &o) { o.load = root; });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(s.message()),
            "checkpoint " + root + "/step-00000001 is of another model: "
            "num_heads is 4 there but 8 here; num_kv_heads is 2 there but 4 "
            "here; head_dim is 16 there but 8 here; rope_theta is 10000 there "
            "but 500000 here");
  EXPECT_FALSE(absl::StrContains(log_, "resumed")) << log_;

  s = train(planOf(llamaSpec(4, 2, "10000", "0.1")), 1,
            [&](exec::TrainerOptions &o) { o.initFrom = root; });
  EXPECT_EQ(std::string(s.message()), "checkpoint " + root +
                             "/step-00000001 is of another model: norm_eps is "
                             "1e-05 there but 0.1 here");

  // The same model resumes.
  s = train(planOf(llamaSpec()), 2, [&](exec::TrainerOptions &o) { o.load = root; });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(absl::StrContains(log_, "resumed from")) << log_;
}

// --allow-model-change hidden_dropout accepts that difference (with a
// note); without it the load is refused, saying what would accept it.
TEST_F(ModelCheck, AllowModelChangeAcceptsDropout) {
  std::string root = saved(llamaSpec(4, 2, "10000", "1e-05", "0.1"));
  plan::Plan fineTune = planOf(llamaSpec());
  absl::Status s =
      train(fineTune, 2, [&](exec::TrainerOptions &o) { o.load = root; });
  EXPECT_EQ(std::string(s.message()),
            "checkpoint " + root + "/step-00000001 is of another model: "
            "hidden_dropout is 0.1 there but 0 here (--allow-model-change "
            "hidden_dropout would accept that difference)");
  s = train(fineTune, 2, [&](exec::TrainerOptions &o) {
    o.load = root;
    ASSERT_TRUE(exec::ParseTrainerFlag("--allow-model-change", "hidden_dropout", &o).ok());
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(absl::StrContains(
      log_, "note: checkpoint " + root +
                "/step-00000001 differs from this model in hidden_dropout "
                "(0.1 there, 0 here), as --allow-model-change accepts\n"))
      << log_;
}

// A checkpoint that does not record its model (saved by a plan without
// one) is compared by its tensors only, with a warning.
TEST_F(ModelCheck, UnrecordedModelWarns) {
  std::string root = saved("");
  absl::Status s = train(planOf(llamaSpec()), 2,
                         [&](exec::TrainerOptions &o) { o.load = root; });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_TRUE(absl::StrContains(
      log_, "warning: the model of checkpoint " + root +
                "/step-00000001 cannot be checked: its manifest does not "
                "record it (saved before checkpoints did); only its "
                "parameters' names and shapes are compared\n"))
      << log_;
}

TEST(ModelCheckFlag, ParsesAndRefuses) {
  exec::TrainerOptions o;
  ASSERT_TRUE(*exec::ParseTrainerFlag("--allow-model-change",
                                      "hidden_dropout,init_std", &o));
  ASSERT_TRUE(*exec::ParseTrainerFlag("--allow-model-change", "max_seq_len", &o));
  EXPECT_EQ(o.allowModelChange,
            (std::set<std::string>{"hidden_dropout", "init_std", "max_seq_len"}));
  absl::StatusOr<bool> bad =
      exec::ParseTrainerFlag("--allow-model-change", "num_heads", &o);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StartsWith(bad.status().message(),
                               "--allow-model-change num_heads: num_heads is "
                               "architectural"))
      << bad.status();
  bad = exec::ParseTrainerFlag("--allow-model-change", "hidden_dropout,", &o);
  EXPECT_EQ(std::string(bad.status().message()),
            "--allow-model-change=hidden_dropout, names no field (expected "
            "--allow-model-change FIELD[,FIELD])");
  EXPECT_TRUE(exec::IsTrainerFlag("--allow-model-change"));
  EXPECT_TRUE(absl::StrContains(exec::kTrainerFlagsUsage,
                                "[--allow-model-change FIELD[,FIELD]]"));
}

TEST_F(ModelCheck, FlagNeedsACheckpoint) {
  absl::Status s = train(planOf(llamaSpec()), 1, [&](exec::TrainerOptions &o) {
    o.allowModelChange = {"hidden_dropout"};
  });
  EXPECT_EQ(std::string(s.message()), "--allow-model-change hidden_dropout applies to the "
                         "checkpoint of --load or --init-from, and neither is "
                         "given");
}

} // namespace
} // namespace braid
