//===- TrainerData.cpp - The datasets, splits and blends of a run ---------===//
//
// PrepareData (TrainerInternal.h). The data is one dataset (--data PREFIX,
// data.path) or a blend (--data "0.3 A 0.7 B" as Megatron's --data-path,
// data.blend); each dataset's documents divide into train, validation and
// test by the split (--split, data.split; Megatron's arithmetic,
// data/Split.h), and the samples of each split blend the datasets' ranges
// of that split (data/BlendedSamples.h). Everything a bad input can get
// wrong is refused here, before the first step: a split that does not
// parse, a weight without a path, a token id the model's vocabulary does
// not have, a validation split smaller than eval_iters global batches.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/TrainerInternal.h"

#include "runtime/ckpt/ModelIdentity.h"
#include "runtime/data/InstructionDataset.h"
#include "runtime/data/Split.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

#include <algorithm>
#include <cmath>

namespace braid::exec::trainer {
namespace {

struct SourceSpec {
  double weight = 1;
  std::string path;
};

/// The datasets of the run and their weights: --data (a prefix, or
/// Megatron's "WEIGHT PREFIX WEIGHT PREFIX ..."), else the plan's blend,
/// else its data_path.
absl::StatusOr<std::vector<SourceSpec>> sourcesOf(const TrainingRun &run) {
  std::vector<SourceSpec> out;
  const std::string &flag = run.options.dataPrefix;
  if (!flag.empty()) {
    std::vector<std::string> words =
        absl::StrSplit(flag, ' ', absl::SkipWhitespace());
    double weight;
    if (words.size() == 1 && !absl::SimpleAtod(words[0], &weight))
      return std::vector<SourceSpec>{{1, words[0]}};
    if (words.empty())
      return absl::InvalidArgumentError("--data names no dataset");
    for (size_t i = 0; i < words.size(); i += 2) {
      if (!absl::SimpleAtod(words[i], &weight) || !std::isfinite(weight) ||
          !(weight > 0))
        return absl::InvalidArgumentError(absl::StrCat(
            "--data \"", flag, "\": \"", words[i],
            "\" is not a weight > 0; expected PREFIX, or WEIGHT PREFIX "
            "[WEIGHT PREFIX ...] (a blend)"));
      if (i + 1 == words.size())
        return absl::InvalidArgumentError(absl::StrCat(
            "--data \"", flag, "\": the weight ", words[i],
            " has no dataset after it (expected WEIGHT PREFIX pairs)"));
      out.push_back({weight, words[i + 1]});
    }
    return out;
  }
  const plan::Training &t = run.t;
  for (const plan::DataSource &source : t.data_blend()) {
    if (source.path().empty() || !std::isfinite(source.weight()) ||
        !(source.weight() > 0))
      return absl::InvalidArgumentError(absl::StrCat(
          "the plan's data blend has a source of weight ", source.weight(),
          " and path \"", source.path(),
          "\": expected a weight > 0 and a path"));
    out.push_back({source.weight(), source.path()});
  }
  if (out.empty() && !t.data_path().empty())
    out.push_back({1, t.data_path()});
  return out;
}

/// "PREFIX", or "PREFIX (weight W)" in a blend.
std::string describe(const SourceSpec &s, size_t sources) {
  return sources > 1 ? absl::StrCat(s.path, " (weight ", s.weight, ")")
                     : s.path;
}

} // namespace

absl::Status PrepareData(TrainingRun &run) {
  const TrainerOptions &options = run.options;
  const plan::Training &t = run.t;
  const int64_t steps = run.steps, seq = run.seq;
  const uint64_t globalBatch = uint64_t(run.globalBatch);

  run.evalInterval = options.evalInterval.value_or(t.eval_interval());
  run.evalIters = options.evalIters.value_or(t.eval_iters());
  if (run.evalInterval > 0 && run.evalIters == 0)
    run.evalIters = 100; // Megatron's default
  const std::string split = options.split.value_or(t.data_split());
  if (run.evalInterval > 0 && split.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        "validation every ", run.evalInterval,
        " steps needs a validation split: give data.split (e.g. \"969,30,1\") "
        "in the job or --split"));
  if (run.evalInterval > 0 && !HasEvalFunctions(run.plan))
    return absl::FailedPreconditionError(
        "validation needs the plan's forward-only functions, which this plan "
        "(of an older braidc) lacks: compile it again");
  std::array<double, 3> fractions{1, 0, 0};
  if (!split.empty()) {
    absl::StatusOr<std::array<double, 3>> parsed = data::ParseSplit(split);
    if (!parsed.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(options.split ? "--split: " : "the plan's data.split: ",
                       parsed.status().message()));
    fractions = *parsed;
  }
  const bool training = run.firstStep <= steps;
  run.instruction = options.instruction.value_or(t.data_instruction());
  // A packed plan's graph reads the positions of packed conversations.
  run.packed = t.data_packed();
  if (run.packed && !run.instruction)
    return absl::InvalidArgumentError(
        "the plan packs conversations (data.pack) but does not read "
        "instruction data: compile it with data.instruction too");
  if (!training && run.evalInterval == 0)
    return absl::OkStatus();

  absl::StatusOr<std::vector<SourceSpec>> sources = sourcesOf(run);
  if (!sources.ok())
    return sources.status();
  if (sources->empty())
    return absl::InvalidArgumentError(
        "no data: give --data PREFIX (a .bin/.idx pair) or data.path in the "
        "job");
  // The model's vocabulary, which every token id must be below.
  int64_t vocab = 0;
  if (!t.model_spec().empty()) {
    absl::StatusOr<spec::ModelSpec> model =
        ckpt::ParseModelSpec(t.model_spec(), "the plan's model");
    if (!model.ok())
      return model.status();
    vocab = model->vocab_size();
  }
  // Each split's sources: every dataset's range of that split.
  std::array<std::vector<data::BlendSource>, 3> bySplit;
  for (const SourceSpec &source : *sources) {
    // Instruction data: the tokens and their loss mask, checked against
    // each other; else the tokens alone.
    const data::IndexedDataset *lossMask = nullptr;
    if (run.instruction) {
      absl::StatusOr<data::InstructionDataset> opened =
          data::OpenInstructionDataset(source.path);
      if (!opened.ok())
        return absl::Status(
            opened.status().code() == absl::StatusCode::kNotFound
                ? absl::StatusCode::kInvalidArgument
                : opened.status().code(),
            absl::StrCat("instruction data (",
                         options.instruction ? "--is-instruction-dataset"
                                             : "the plan's data.instruction",
                         "): ", opened.status().message()));
      run.datasets.push_back(std::make_unique<data::IndexedDataset>(
          std::move(opened->lossMask)));
      lossMask = run.datasets.back().get();
      run.datasets.push_back(
          std::make_unique<data::IndexedDataset>(std::move(opened->tokens)));
    } else {
      absl::StatusOr<data::IndexedDataset> opened =
          data::IndexedDataset::Open(source.path);
      if (!opened.ok())
        return opened.status();
      run.datasets.push_back(
          std::make_unique<data::IndexedDataset>(std::move(*opened)));
      // A loss mask beside the tokens that the run does not read: said, in
      // case the job meant to train on the responses only.
      const std::string maskIdx = data::LossMaskPrefix(source.path) + ".idx";
      if (options.log && run.writer && std::ifstream(maskIdx).good())
        *options.log << "note: " << source.path << " has a loss mask ("
                     << maskIdx
                     << "), which this run does not read: it trains on every "
                        "token, the documents concatenated; for the loss over "
                        "the responses only, set data.instruction in the job "
                        "or give --is-instruction-dataset\n";
    }
    const data::IndexedDataset &dataset = *run.datasets.back();
    if (vocab > 0) {
      absl::StatusOr<int64_t> largest = data::LargestTokenId(dataset);
      if (!largest.ok())
        return largest.status();
      if (*largest >= vocab)
        return absl::InvalidArgumentError(absl::StrCat(
            describe(source, sources->size()), ": the dataset has token id ",
            *largest, ", outside the model's vocabulary of ", vocab,
            " (a dataset tokenized for another model?)"));
    }
    auto ranges = data::SplitDocuments(dataset.numDocuments(), fractions);
    for (int k = 0; k < 3; ++k) {
      auto [begin, end] = ranges[size_t(k)];
      if (end > begin)
        bySplit[size_t(k)].push_back(
            {&dataset, source.weight, begin, end - begin, lossMask});
    }
  }
  data::GptSampleOptions base;
  base.seqLength = seq;
  base.seed = run.seed;
  base.order = run.order == "sequential" ? data::SampleOrder::kSequential
                                         : data::SampleOrder::kShuffled;
  base.layout = run.packed        ? data::SampleLayout::kPacked
                : run.instruction ? data::SampleLayout::kDocuments
                                  : data::SampleLayout::kWindows;
  // What a sample is, in the messages below.
  const std::string unit = run.instruction
                               ? std::string("conversations")
                               : absl::StrCat("samples of ", seq, " tokens");
  const char *kNames[3] = {"training", "validation", "test"};
  auto samplesOf = [&](int k, uint64_t count)
      -> absl::StatusOr<data::BlendedSamples> {
    if (bySplit[size_t(k)].size() != sources->size())
      return absl::InvalidArgumentError(absl::StrCat(
          "the split \"", split.empty() ? "1,0,0" : split, "\" leaves the ",
          kNames[k], " split of ",
          describe((*sources)[0], sources->size()),
          sources->size() > 1 ? " (or another dataset of the blend)" : "",
          " without documents"));
    data::GptSampleOptions o = base;
    o.numSamples = count;
    absl::StatusOr<data::BlendedSamples> made =
        data::BlendedSamples::Create(bySplit[size_t(k)], o);
    if (!made.ok())
      return absl::Status(made.status().code(),
                          absl::StrCat("the ", kNames[k], " split: ",
                                       made.status().message()));
    return made;
  };
  if (training) {
    // A training split shorter than one global batch would fill each batch
    // with the same text again (the next epochs): refused rather than
    // trained on copies. (Windows: an epoch of T tokens holds (T - 1) / L
    // samples, fewer than the batch's exactly when T < batch x L + 1.)
    absl::StatusOr<data::BlendedSamples> made =
        samplesOf(0, uint64_t(run.resumed.consumedSamples) +
                         uint64_t(steps - run.resumed.step) * globalBatch);
    if (!made.ok())
      return made.status();
    for (size_t d = 0; d < made->numSources(); ++d) {
      const data::GptSamples &source = made->source(d);
      if (source.samplesPerEpoch() >= globalBatch ||
          source.numSamples() < globalBatch)
        continue;
      const std::string holds =
          run.packed ? absl::StrCat(source.numDocuments(),
                                    " conversations, packed into ",
                                    source.samplesPerEpoch(), " samples")
          : run.instruction
              ? absl::StrCat(source.numDocuments(), " conversations")
              : absl::StrCat(source.tokensPerEpoch(), " tokens");
      const std::string reads =
          run.packed ? absl::StrCat(globalBatch, " packed samples")
          : run.instruction
              ? absl::StrCat(globalBatch, " conversations")
              : absl::StrCat(globalBatch, " samples of ", seq, " tokens, ",
                             globalBatch * uint64_t(seq) + 1, " tokens");
      return absl::InvalidArgumentError(absl::StrCat(
          describe((*sources)[d], sources->size()),
          split.empty() ? ": the dataset holds " : ": the training split holds ",
          holds, ", fewer than one global batch reads (", reads,
          "): every batch would repeat the same text; give more data, or a "
          "smaller batch",
          run.instruction ? "" : " or sequence length"));
    }
    if (run.instruction && options.log && run.writer)
      for (size_t d = 0; d < made->numSources(); ++d) {
        const data::GptSamples &source = made->source(d);
        *options.log << "instruction data: "
                     << describe((*sources)[d], sources->size()) << ": "
                     << source.numDocuments()
                     << " conversations for training, "
                     << source.truncatedDocuments()
                     << " of them truncated to seq_length + 1 = " << seq + 1
                     << " tokens\n";
        // What packing saves: the padding of the samples, packed against
        // one conversation per sample.
        if (run.packed) {
          const data::GptSamples::PackingStats p = source.packingStats();
          *options.log << absl::StrFormat(
              "packed: %d conversations in %d samples of %d tokens, %.1f%% "
              "of them padding (one conversation per sample: %d samples, "
              "%.1f%% padding)\n",
              p.documents, p.packedSamples, seq + 1, 100 * p.packedPadding,
              p.documents, 100 * p.paddedPadding);
        }
      }
    run.samples.emplace(std::move(*made));
  }
  if (run.evalInterval == 0)
    return absl::OkStatus();
  // Validation reads the same eval_iters global batches every time, each
  // sample once: the split must hold them within one epoch.
  const uint64_t evalSamples = uint64_t(run.evalIters) * globalBatch;
  absl::StatusOr<data::BlendedSamples> valid = samplesOf(1, evalSamples);
  if (!valid.ok())
    return valid.status();
  for (size_t d = 0; d < valid->numSources(); ++d) {
    const data::GptSamples &s = valid->source(d);
    const uint64_t holds = s.samplesPerEpoch();
    if (s.numSamples() > holds)
      return absl::InvalidArgumentError(absl::StrCat(
          "eval_iters ", run.evalIters, " x the global batch of ", globalBatch,
          " reads ", evalSamples, " validation samples (",
          s.numSamples(), " of them from ",
          describe((*sources)[d], sources->size()),
          "), but its validation split holds ", holds, " ", unit,
          ": give a smaller eval_iters (--eval-iters) or a larger "
          "validation share of data.split"));
  }
  run.validSamples.emplace(std::move(*valid));
  // The test split, at the end: as many of the same global batches as it
  // holds (none when it holds less than one).
  if (bySplit[2].size() != sources->size())
    return absl::OkStatus();
  for (int64_t iters = run.evalIters; iters > 0;) {
    absl::StatusOr<data::BlendedSamples> test =
        samplesOf(2, uint64_t(iters) * globalBatch);
    if (!test.ok())
      return absl::OkStatus(); // too small for one sample: no test loss
    // The share of what each dataset is asked for that its split holds.
    double fits = 1;
    for (size_t d = 0; d < test->numSources(); ++d) {
      const data::GptSamples &s = test->source(d);
      fits = std::min(fits, double(s.samplesPerEpoch()) /
                                double(s.numSamples()));
    }
    if (fits >= 1) {
      run.testIters = iters;
      run.testSamples.emplace(std::move(*test));
      break;
    }
    iters = std::min(iters - 1, int64_t(std::floor(double(iters) * fits)));
  }
  return absl::OkStatus();
}

} // namespace braid::exec::trainer
