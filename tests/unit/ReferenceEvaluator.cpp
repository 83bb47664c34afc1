//===- ReferenceEvaluator.cpp - Runs model IR on the CPU kernels ----------===//

#include "ReferenceEvaluator.h"

#include "dialects/model/ModelDialect.h"
#include "runtime/cpu/Kernels.h"
#include "runtime/cpu/Optimizer.h"

#include "llvm/ADT/TypeSwitch.h"

#include <unordered_map>

using namespace mlir;
using namespace braid;
using namespace braid::model;
using namespace braid::cpu;
using braid::test::Buffer;

namespace {

ArrayRef<int64_t> shape(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}
int64_t last(Value v) { return shape(v).back(); }
int64_t size(Value v) { return getNumElements(v.getType()); }

class Evaluator {
public:
  std::string error;

  /// Runs the ops of `block` (its arguments bound to `args`) and returns the
  /// operands of its terminator.
  std::vector<Buffer> run(Block &block, const std::vector<Buffer> &args) {
    for (auto [arg, buffer] : llvm::zip(block.getArguments(), args))
      values[arg] = buffer;
    for (Operation &op : block) {
      if (op.hasTrait<OpTrait::IsTerminator>()) {
        std::vector<Buffer> out;
        for (Value v : op.getOperands())
          out.push_back(values[v]);
        return out;
      }
      if (!step(&op)) {
        if (error.empty())
          error = "cannot evaluate " + op.getName().getStringRef().str();
        return {};
      }
    }
    return {};
  }

private:
  Buffer &in(Value v) { return values[v]; }
  Buffer &out(Value v) {
    Buffer &b = values[v];
    b.assign(size(v), 0.0);
    return b;
  }
  std::vector<int32_t> ids(Value v) {
    Buffer &b = values[v];
    return std::vector<int32_t>(b.begin(), b.end());
  }
  const double *opt(Value v) { return v ? in(v).data() : nullptr; }

  bool step(Operation *op);

  struct ValueHash {
    size_t operator()(Value v) const { return hash_value(v); }
  };
  /// Node-based, so references to buffers stay valid while others are
  /// added (kernel calls take several of them at once).
  std::unordered_map<Value, Buffer, ValueHash> values;
};

bool Evaluator::step(Operation *op) {
  return llvm::TypeSwitch<Operation *, bool>(op)
      .Case([&](LayerOp layer) {
        std::vector<Buffer> args;
        for (Value v : layer.getInputs())
          args.push_back(in(v));
        Evaluator inner;
        std::vector<Buffer> results = inner.run(layer.getBody().front(), args);
        if (!inner.error.empty()) {
          error = inner.error;
          return false;
        }
        for (auto [r, b] : llvm::zip(layer.getResults(), results))
          values[r] = b;
        return true;
      })
      .Case([&](EmbeddingOp e) {
        std::vector<int32_t> tokens = ids(e.getIds());
        embeddingForward(in(e.getTable()).data(), tokens.data(), size(e.getIds()),
                         last(e.getTable()), out(e.getResult()).data());
        return true;
      })
      .Case([&](PositionEmbeddingOp p) {
        positionEmbeddingForward(in(p.getTable()).data(), shape(p.getTokens())[0],
                                 shape(p.getTokens())[1], last(p.getTable()),
                                 out(p.getResult()).data());
        return true;
      })
      .Case([&](LinearOp l) {
        auto [inDim, outDim] = l.getWeightInOut();
        LinearShape s{size(l.getX()) / inDim, inDim, outDim, l.getTransposeW()};
        linearForward(in(l.getX()).data(), in(l.getWeight()).data(),
                      opt(l.getBias()), s, out(l.getResult()).data());
        return true;
      })
      .Case([&](RmsNormOp n) {
        int64_t d = last(n.getX());
        Buffer rstd(size(n.getX()) / d);
        rmsNormForward(in(n.getX()).data(), in(n.getWeight()).data(),
                       size(n.getX()) / d, d, n.getEps().convertToDouble(),
                       out(n.getResult()).data(), rstd.data());
        return true;
      })
      .Case([&](LayerNormOp n) {
        int64_t d = last(n.getX()), rows = size(n.getX()) / d;
        Buffer mean(rows), rstd(rows);
        layerNormForward(in(n.getX()).data(), in(n.getWeight()).data(),
                         in(n.getBias()).data(), rows, d,
                         n.getEps().convertToDouble(), out(n.getResult()).data(),
                         mean.data(), rstd.data());
        return true;
      })
      .Case([&](RopeOp r) {
        int64_t hd = r.getHeadDimAttr().getInt();
        ropeForward(in(r.getX()).data(), shape(r.getX())[0], shape(r.getX())[1],
                    last(r.getX()) / hd, hd, r.getTheta().convertToDouble(),
                    out(r.getResult()).data());
        return true;
      })
      .Case([&](AttentionOp a) {
        AttentionShape s{shape(a.getQ())[0], shape(a.getQ())[1],
                         a.getNumHeadsAttr().getInt(),
                         a.getNumKvHeadsAttr().getInt(), a.getHeadDim(),
                         a.getScale().convertToDouble(), a.getCausal(),
                         a.getAlibi()};
        Buffer lse(s.batch * s.heads * s.seq);
        attentionForward(in(a.getQ()).data(), in(a.getK()).data(),
                         in(a.getV()).data(), s, out(a.getResult()).data(),
                         lse.data());
        return true;
      })
      .Case([&](QkvSplitOp q) {
        QkvShape s{size(q.getQkv()) / last(q.getQkv()),
                   q.getNumHeadsAttr().getInt(), q.getNumKvHeadsAttr().getInt(),
                   q.getHeadDimAttr().getInt(),
                   q.getLayout() == QkvLayout::per_head};
        qkvSplitForward(in(q.getQkv()).data(), s, out(q.getQ()).data(),
                        out(q.getK()).data(), out(q.getV()).data());
        return true;
      })
      .Case([&](SwigluOp s) {
        if (s.isPacked())
          swigluPackedForward(in(s.getGate()).data(),
                              size(s.getResult()) / last(s.getResult()),
                              last(s.getResult()), out(s.getResult()).data());
        else
          swigluForward(in(s.getGate()).data(), in(s.getUp()).data(),
                        size(s.getGate()), out(s.getResult()).data());
        return true;
      })
      .Case([&](GeluOp g) {
        geluForward(in(g.getX()).data(), size(g.getX()), g.getTanh(),
                    out(g.getResult()).data());
        return true;
      })
      .Case([&](AddOp a) {
        Buffer &l = in(a.getLhs()), &r = in(a.getRhs());
        Buffer &o = out(a.getResult());
        for (size_t i = 0; i < o.size(); ++i)
          o[i] = l[i] + r[i];
        return true;
      })
      .Case([&](ScaleOp s) {
        scaleForward(in(s.getX()).data(), size(s.getX()),
                     s.getScale().convertToDouble(), out(s.getResult()).data());
        return true;
      })
      .Case([&](CrossEntropyOp c) {
        std::vector<int32_t> t = ids(c.getTargets());
        int64_t vocab = last(c.getLogits()), rows = size(c.getLogits()) / vocab;
        Buffer lse(rows);
        int64_t counted = 0;
        out(c.getLoss())[0] = crossEntropyForward(
            in(c.getLogits()).data(), t.data(), rows, vocab,
            c.getIgnoreIndexAttr().getInt(), lse.data(), &counted);
        return true;
      })
      .Case([&](EmbeddingGradOp e) {
        std::vector<int32_t> tokens = ids(e.getIds());
        embeddingBackward(in(e.getDy()).data(), tokens.data(), size(e.getIds()),
                          last(e.getDtable()), out(e.getDtable()).data());
        return true;
      })
      .Case([&](PositionEmbeddingGradOp p) {
        positionEmbeddingBackward(in(p.getDy()).data(), shape(p.getDy())[0],
                                  shape(p.getDy())[1], last(p.getDy()),
                                  out(p.getDtable()).data());
        return true;
      })
      .Case([&](LinearGradInputOp l) {
        int64_t outDim = last(l.getDy()), inDim = last(l.getDx());
        LinearShape s{size(l.getDy()) / outDim, inDim, outDim, l.getTransposeW()};
        linearBackward<double>(nullptr, in(l.getWeight()).data(),
                               in(l.getDy()).data(), s, out(l.getDx()).data(),
                               nullptr, nullptr);
        return true;
      })
      .Case([&](LinearGradWeightOp l) {
        int64_t inDim = last(l.getX()), outDim = last(l.getDy());
        LinearShape s{size(l.getX()) / inDim, inDim, outDim, l.getTransposeW()};
        linearBackward<double>(in(l.getX()).data(), nullptr, in(l.getDy()).data(),
                               s, nullptr, out(l.getDweight()).data(), nullptr);
        return true;
      })
      .Case([&](BiasGradOp b) {
        int64_t outDim = last(b.getDy());
        LinearShape s{size(b.getDy()) / outDim, 0, outDim, false};
        linearBackward<double>(nullptr, nullptr, in(b.getDy()).data(), s,
                               nullptr, nullptr, out(b.getDbias()).data());
        return true;
      })
      .Case([&](RmsNormGradOp n) {
        int64_t d = last(n.getX()), rows = size(n.getX()) / d;
        Buffer y(size(n.getX())), rstd(rows);
        rmsNormForward(in(n.getX()).data(), in(n.getWeight()).data(), rows, d,
                       n.getEps().convertToDouble(), y.data(), rstd.data());
        rmsNormBackward(in(n.getX()).data(), in(n.getWeight()).data(),
                        rstd.data(), in(n.getDy()).data(), rows, d,
                        out(n.getDx()).data(), out(n.getDweight()).data());
        return true;
      })
      .Case([&](LayerNormGradOp n) {
        int64_t d = last(n.getX()), rows = size(n.getX()) / d;
        Buffer y(size(n.getX())), mean(rows), rstd(rows), zeros(d, 0.0);
        layerNormForward(in(n.getX()).data(), in(n.getWeight()).data(),
                         zeros.data(), rows, d, n.getEps().convertToDouble(),
                         y.data(), mean.data(), rstd.data());
        layerNormBackward(in(n.getX()).data(), in(n.getWeight()).data(),
                          mean.data(), rstd.data(), in(n.getDy()).data(), rows,
                          d, out(n.getDx()).data(), out(n.getDweight()).data(),
                          out(n.getDbias()).data());
        return true;
      })
      .Case([&](RopeGradOp r) {
        int64_t hd = r.getHeadDimAttr().getInt();
        ropeBackward(in(r.getDy()).data(), shape(r.getDy())[0],
                     shape(r.getDy())[1], last(r.getDy()) / hd, hd,
                     r.getTheta().convertToDouble(), out(r.getDx()).data());
        return true;
      })
      .Case([&](AttentionGradOp a) {
        int64_t heads = a.getNumHeadsAttr().getInt();
        AttentionShape s{shape(a.getQ())[0], shape(a.getQ())[1], heads,
                         a.getNumKvHeadsAttr().getInt(), last(a.getQ()) / heads,
                         a.getScale().convertToDouble(), a.getCausal(),
                         a.getAlibi()};
        Buffer o(size(a.getQ())), lse(s.batch * s.heads * s.seq);
        attentionForward(in(a.getQ()).data(), in(a.getK()).data(),
                         in(a.getV()).data(), s, o.data(), lse.data());
        attentionBackward(in(a.getQ()).data(), in(a.getK()).data(),
                          in(a.getV()).data(), in(a.getOut()).data(), lse.data(),
                          in(a.getDout()).data(), s, out(a.getDq()).data(),
                          out(a.getDk()).data(), out(a.getDv()).data());
        return true;
      })
      .Case([&](QkvConcatOp q) {
        QkvShape s{size(q.getQkv()) / last(q.getQkv()),
                   q.getNumHeadsAttr().getInt(), q.getNumKvHeadsAttr().getInt(),
                   q.getHeadDimAttr().getInt(),
                   q.getLayout() == QkvLayout::per_head};
        qkvSplitBackward(in(q.getQ()).data(), in(q.getK()).data(),
                         in(q.getV()).data(), s, out(q.getQkv()).data());
        return true;
      })
      .Case([&](SwigluGradOp s) {
        if (!s.getUp())
          swigluPackedBackward(in(s.getGate()).data(), in(s.getDy()).data(),
                               size(s.getDy()) / last(s.getDy()), last(s.getDy()),
                               out(s.getDgate()).data());
        else
          swigluBackward(in(s.getGate()).data(), in(s.getUp()).data(),
                         in(s.getDy()).data(), size(s.getDy()),
                         out(s.getDgate()).data(), out(s.getDup()).data());
        return true;
      })
      .Case([&](GeluGradOp g) {
        geluBackward(in(g.getX()).data(), in(g.getDy()).data(), size(g.getX()),
                     g.getTanh(), out(g.getDx()).data());
        return true;
      })
      .Case([&](CrossEntropyGradOp c) {
        std::vector<int32_t> t = ids(c.getTargets());
        int64_t vocab = last(c.getLogits()), rows = size(c.getLogits()) / vocab;
        int64_t ignore = c.getIgnoreIndexAttr().getInt();
        Buffer lse(rows);
        int64_t counted = 0;
        crossEntropyForward(in(c.getLogits()).data(), t.data(), rows, vocab,
                            ignore, lse.data(), &counted);
        crossEntropyBackward(in(c.getLogits()).data(), t.data(), lse.data(),
                             in(c.getDloss())[0], rows, vocab, ignore, counted,
                             out(c.getDlogits()).data());
        return true;
      })
      .Case([&](GradNormOp g) {
        std::vector<cpu::GradView<double>> views;
        for (Value v : g.getGrads())
          views.push_back({in(v).data(), size(v)});
        absl::StatusOr<double> norm = cpu::globalGradNorm<double>(views);
        if (!norm.ok()) {
          error = std::string(norm.status().message());
          return false;
        }
        absl::StatusOr<cpu::GradClip> clipOr =
            cpu::computeGradClip(*norm, g.getMaxNorm().convertToDouble());
        if (!clipOr.ok()) {
          error = std::string(clipOr.status().message());
          return false;
        }
        cpu::GradClip clip = *clipOr;
        out(g.getNorm())[0] = clip.norm;
        out(g.getScale())[0] = clip.scale;
        return true;
      })
      .Case([&](AdamWOp a) {
        Buffer &p = out(a.getNewParam()), &m = out(a.getNewM()),
               &v = out(a.getNewV());
        p = in(a.getParam());
        m = in(a.getM());
        v = in(a.getV());
        cpu::AdamWConfig c;
        c.beta1 = a.getBeta1().convertToDouble();
        c.beta2 = a.getBeta2().convertToDouble();
        c.eps = a.getEps().convertToDouble();
        c.weightDecay = a.getWeightDecay().convertToDouble();
        absl::Status s = cpu::adamwStep<double>(
            p.data(), in(a.getGrad()).data(), m.data(), v.data(), size(a.getParam()),
            c, in(a.getLr())[0], int64_t(in(a.getStep())[0]),
            in(a.getGradScale())[0]);
        if (!s.ok())
          error = std::string(s.message());
        return s.ok();
      })
      .Default([&](Operation *) { return false; });
}

} // namespace

std::vector<Buffer> braid::test::evaluate(func::FuncOp func,
                                          const std::vector<Buffer> &args,
                                          std::string &error) {
  Evaluator evaluator;
  std::vector<Buffer> results = evaluator.run(func.getBody().front(), args);
  error = evaluator.error;
  return results;
}
