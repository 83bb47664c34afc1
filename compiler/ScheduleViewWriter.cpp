//===- ScheduleViewWriter.cpp - The schedule's page -----------------------===//
//
// writePage: the view drawn at a fixed number of pixels per time unit,
// chosen so that the shortest block stays wide enough to carry its
// micro-batch number, as one self-contained HTML page (inline SVG and CSS).
//
//===----------------------------------------------------------------------===//

#include "compiler/ScheduleViewInternal.h"

#include "runtime/plan/PlanLoader.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace braid::scheduleview {

//===----------------------------------------------------------------------===//
// Text
//===----------------------------------------------------------------------===//

namespace {

std::string printf1(const char *format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

/// A pixel coordinate.
std::string px(double value) { return printf1("%.2f", value); }

/// A time as the page's data attributes state it.
std::string exact(double value) { return printf1("%.10g", value); }

std::string percent(double fraction) {
  return printf1("%.1f", 100 * fraction) + " %";
}

std::string escape(llvm::StringRef text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
    case '&':
      out += "&amp;";
      break;
    case '<':
      out += "&lt;";
      break;
    case '>':
      out += "&gt;";
      break;
    case '"':
      out += "&quot;";
      break;
    case '\'':
      out += "&#39;";
      break;
    default:
      out += c;
    }
  }
  return out;
}

} // namespace

/// `value` in three digits with an SI prefix and `unit`: "2.95 MFLOP".
std::string quantity(double value, llvm::StringRef unit) {
  static const char *const kPrefixes[] = {"", "k", "M", "G", "T", "P", "E"};
  int prefix = 0;
  while (std::fabs(value) >= 999.5 && prefix < 6) {
    value /= 1000;
    ++prefix;
  }
  std::string text = printf1("%.3g", value) + " " + kPrefixes[prefix];
  if (unit.empty() && prefix == 0)
    text.pop_back();
  return text + unit.str();
}

/// Ranks as ranges, "0-3, 8-11"; with more than four ranges, the first three
/// and the count.
std::string rankList(const std::vector<int64_t> &ranks) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t r : ranks) {
    if (!ranges.empty() && ranges.back().second + 1 == r)
      ranges.back().second = r;
    else
      ranges.push_back({r, r});
  }
  std::string out;
  size_t shown = ranges.size() > 4 ? 3 : ranges.size();
  for (size_t i = 0; i < shown; ++i) {
    if (i)
      out += ", ";
    out += std::to_string(ranges[i].first);
    if (ranges[i].second > ranges[i].first)
      out += (ranges[i].second == ranges[i].first + 1 ? ", " : "\u2013") +
             std::to_string(ranges[i].second);
  }
  if (shown < ranges.size())
    out += ", \u2026 (" + std::to_string(ranks.size()) + " ranks)";
  return out;
}

namespace {

/// The lane's row of collectives: the update's, then those of the calls
/// that run a function of their own.
std::string updateCollectives(const Lane &lane) {
  std::string out = lane.hasUpdate ? collectiveList(lane.update) : "no update";
  for (const auto &[call, fn] : lane.ownCalls)
    out += "; in " + fn.name + " (" +
           (call.first == pipeline::Work::BackwardWeight ? "weight gradients"
            : call.first == pipeline::Work::Forward      ? "forward"
                                                         : "backward") +
           " of micro-batch " + std::to_string(call.second) +
           "): " + collectiveList(fn);
  return out;
}

//===----------------------------------------------------------------------===//
// Drawing
//===----------------------------------------------------------------------===//

constexpr double kLabelWidth = 230; // the lane labels' column
constexpr double kX0 = 14;          // the timeline's left edge
constexpr double kTop = 30;         // the time axis above the lanes
constexpr double kLaneHeight = 30;
constexpr double kLaneGap = 20; // room for the transfers' arrows
constexpr double kBlockTop = 4;
constexpr double kBlockHeight = 22;
constexpr double kBottom = 30;     // the step's end, below the lanes
constexpr double kMinBlockPx = 16; // the shortest block, at least
constexpr double kMinTimelinePx = 640;
constexpr double kMaxTimelinePx = 24000;
constexpr double kUpdatePx = 66; // the update block (not timed)
constexpr double kRightPad = 24;

struct Geometry {
  double scale = 1; ///< px per time unit
  double laneY(int64_t lane) const {
    return kTop + lane * (kLaneHeight + kLaneGap);
  }
  double x(double time) const { return kX0 + time * scale; }
  double blockTop(int64_t lane) const { return laneY(lane) + kBlockTop; }
  double blockBottom(int64_t lane) const {
    return blockTop(lane) + kBlockHeight;
  }
};

/// Pixels per time unit: the shortest block kMinBlockPx wide, the timeline
/// within [kMinTimelinePx, kMaxTimelinePx].
double chooseScale(const pipeline::Timeline &timeline) {
  double step = timeline.stepTime;
  if (step <= 0)
    return 1;
  double shortest = step;
  for (const auto &rank : timeline.ranks)
    for (const pipeline::Interval &i : rank)
      if (i.end > i.start)
        shortest = std::min(shortest, i.end - i.start);
  double scale = kMinBlockPx / shortest;
  if (step * scale > kMaxTimelinePx)
    scale = kMaxTimelinePx / step;
  if (step * scale < kMinTimelinePx)
    scale = kMinTimelinePx / step;
  return scale;
}

/// The axis' tick spacing: 1, 2 or 5 x 10^k time units, at least 90 px.
double tickSpacing(double scale) {
  double raw = 90 / scale;
  double base = std::pow(10, std::floor(std::log10(raw)));
  for (double f : {1.0, 2.0, 5.0, 10.0})
    if (f * base >= raw)
      return f * base;
  return 10 * base;
}

const char *workClass(pipeline::Work work) {
  switch (work) {
  case pipeline::Work::Forward:
    return "forward";
  case pipeline::Work::Backward:
  case pipeline::Work::BackwardInput:
    return "backward";
  case pipeline::Work::BackwardWeight:
    return "weight";
  }
  return "forward";
}

const char *kStyle = R"css(
body { font: 13px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
       color: #1f2937; margin: 18px 22px; background: #fff; }
h1 { font-size: 19px; margin: 0 0 2px; }
p.sub { margin: 0 0 10px; color: #4b5563; }
.facts { display: flex; flex-wrap: wrap; gap: 8px; margin: 0 0 10px; }
.fact { border: 1px solid #e5e7eb; border-radius: 6px; padding: 5px 10px;
        background: #f9fafb; }
.fact b { display: block; font-size: 11px; font-weight: 600; color: #6b7280;
          text-transform: uppercase; letter-spacing: .03em; }
.fact span { font-size: 14px; font-weight: 600; }
p.note { margin: 0 0 8px; color: #4b5563; max-width: 1100px; }
.legend { display: flex; flex-wrap: wrap; gap: 16px; margin: 6px 0 10px;
          align-items: center; }
.legend span { display: inline-flex; align-items: center; gap: 5px; }
.chart { display: flex; align-items: flex-start; border: 1px solid #e5e7eb;
         border-radius: 6px; }
.chart .scroll { overflow-x: auto; flex: 1 1 auto; }
svg text { font-family: inherit; }
.lane-title { font-size: 12.5px; font-weight: 600; fill: #111827; }
.lane-sub { font-size: 11px; fill: #6b7280; }
.axis text { font-size: 10.5px; fill: #6b7280; text-anchor: middle; }
.axis line { stroke: #e5e7eb; }
.lane-bg { fill: url(#idle); }
.block rect { stroke: #fff; stroke-width: .6; }
.block text { font-size: 10px; text-anchor: middle; pointer-events: none; }
.forward rect, .sw-forward { fill: #2f6fdf; background: #2f6fdf; }
.forward text { fill: #fff; }
.backward rect, .sw-backward { fill: #f59e0b; background: #f59e0b; }
.backward text { fill: #3b2500; }
.weight rect, .sw-weight { fill: #16a34a; background: #16a34a; }
.weight text { fill: #fff; }
.update rect.body, .sw-update { fill: #7c3aed; background: #7c3aed; }
.update text { fill: #fff; font-weight: 600; }
.collective, .sw-collective { fill: #f0abfc; background: #f0abfc; }
.block:hover rect.body, .block:hover > rect { stroke: #111827; stroke-width: 1.2; }
.xfer { stroke: #6b7280; stroke-width: .9; opacity: .75; }
.step-end { stroke: #111827; stroke-dasharray: 4 3; }
.step-end-label { font-size: 11px; fill: #111827; text-anchor: end; }
.swatch { display: inline-block; width: 22px; height: 13px; border-radius: 2px; }
.sw-idle { background: repeating-linear-gradient(45deg, #f3f4f6 0 3px,
           #d9dce1 3px 5px); border: 1px solid #e5e7eb; }
table.lanes { border-collapse: collapse; margin-top: 12px; font-size: 12px; }
table.lanes th, table.lanes td { border-bottom: 1px solid #e5e7eb;
  padding: 3px 10px; text-align: right; white-space: nowrap; }
table.lanes th:first-child, table.lanes td:first-child { text-align: left; }
table.lanes th { color: #6b7280; font-weight: 600; }
)css";

class Writer {
public:
  Writer(const bp::Plan &plan, const View &view,
         const ScheduleViewOptions &options)
      : plan(plan), view(view), options(options) {
    g.scale = chooseScale(view.timeline);
  }

  std::string page();

private:
  void header(llvm::raw_ostream &os);
  void legend(llvm::raw_ostream &os);
  void labels(llvm::raw_ostream &os);
  void timeline(llvm::raw_ostream &os);
  void transfers(llvm::raw_ostream &os);
  void laneTable(llvm::raw_ostream &os);
  std::string blockTooltip(int64_t lane, const pipeline::Interval &interval,
                           int64_t slot) const;

  double height() const { return g.laneY(view.p) - kLaneGap + kBottom; }
  double width() const {
    return g.x(view.timeline.stepTime) + kUpdatePx + kRightPad;
  }
  bool hasWeightBlocks() const {
    for (const auto &rank : view.timeline.ranks)
      for (const pipeline::Interval &i : rank)
        if (i.step.work == pipeline::Work::BackwardWeight)
          return true;
    return false;
  }

  const bp::Plan &plan;
  const View &view;
  const ScheduleViewOptions &options;
  Geometry g;
};

void Writer::header(llvm::raw_ostream &os) {
  const bp::Mesh &mesh = plan.mesh();
  std::string meshText;
  for (int i = 0; i < mesh.axes_size() && i < mesh.sizes_size(); ++i)
    meshText += (i ? " \u00d7 " : "") + escape(mesh.axes(i)) + " " +
                std::to_string(mesh.sizes(i));
  int64_t world = bp::WorldSize(plan);
  meshText += " = " + std::to_string(world) + (world == 1 ? " rank" : " ranks");

  std::string name = options.source.empty() ? "a plan" : options.source;
  os << "<h1>Schedule of " << escape(name) << "</h1>\n";
  os << "<p class=\"sub\">One optimizer step of every rank as the plan orders "
        "it, timed by <code>pipeline::simulate</code>: "
     << (view.pipelined
             ? "one lane per pipeline stage (the ranks of a stage run the "
               "same program)."
             : "the plan has no pipeline, so one lane: the micro-steps in "
               "sequence, then the update.")
     << "</p>\n";

  auto fact = [&](llvm::StringRef label, const std::string &value) {
    os << "<div class=\"fact\"><b>" << label << "</b><span>" << value
       << "</span></div>\n";
  };
  os << "<div class=\"facts\">\n";
  fact("mesh", meshText);
  if (view.pipelined)
    fact("schedule", escape(view.scheme.empty() ? "(unnamed)" : view.scheme) +
                         ", " + std::to_string(view.p) + " stages");
  else
    fact("schedule", "no pipeline (gradient accumulation)");
  const bp::Training &t = plan.training();
  std::string micro = std::to_string(view.m) + " per step";
  if (t.micro_batch_size() > 0 && t.seq_length() > 0)
    micro += " of " + std::to_string(t.micro_batch_size()) + " \u00d7 " +
             std::to_string(t.seq_length()) + " tokens";
  fact("micro-batches", micro);
  if (t.num_layers() > 0)
    fact("layers", std::to_string(t.num_layers()));
  fact("predicted step time", view.amount(view.timeline.stepTime));
  double low = 1, high = 0;
  for (double b : view.timeline.bubble) {
    low = std::min(low, b);
    high = std::max(high, b);
  }
  std::string bubble = view.timeline.bubble.empty() ? "-"
                       : low == high
                           ? percent(low)
                           : percent(low) + " \u2013 " + percent(high);
  fact(view.p > 1 ? "bubble per lane" : "bubble", bubble);
  if (view.pipelined && view.p > 1 &&
      (view.scheme == "gpipe" || view.scheme == "1f1b"))
    fact("bubble, uniform stages",
         "(p\u22121)/(m+p\u22121) = " +
             percent(double(view.p - 1) / double(view.m + view.p - 1)));
  os << "</div>\n";

  os << "<p class=\"note\"><b>Cost proxy:</b> ";
  if (view.flops)
    os << "each forward and backward takes as long as the FLOPs per rank of "
          "its matrix-product kernels (LINEAR, LINEAR_GRAD_INPUT, "
          "LINEAR_GRAD_WEIGHT, ATTENTION, ATTENTION_GRAD; causal attention's "
          "masked scores not counted), the same rate on every rank. Times "
          "are in FLOP of that work, uncalibrated.";
  else
    os << "each forward and backward takes as long as its number of "
          "instructions (some function has no matrix products to count), "
          "the same rate on every rank. Times are in instructions.";
  os << " Transfers take no time; the update is not simulated and is drawn at "
        "a fixed width after each lane's last step.</p>\n";
}

void Writer::legend(llvm::raw_ostream &os) {
  auto item = [&](llvm::StringRef swatch, llvm::StringRef text) {
    os << "<span>" << swatch << text << "</span>";
  };
  os << "<div class=\"legend\">";
  item("<i class=\"swatch sw-forward\"></i>", "forward");
  bool weights = hasWeightBlocks();
  item("<i class=\"swatch sw-backward\"></i>",
       weights ? "backward (input gradient)" : "backward");
  if (weights)
    item("<i class=\"swatch sw-weight\"></i>", "weight gradient");
  bool updates = false, collectives = false;
  for (const Lane &lane : view.lanes) {
    updates |= lane.hasUpdate;
    collectives |= !lane.update.collectives.empty();
  }
  if (updates)
    item("<i class=\"swatch sw-update\"></i>", "update (not timed)");
  if (collectives)
    item("<i class=\"swatch sw-collective\"></i>", "collective in the update");
  if (view.pipelined && view.p > 1) {
    item("<svg width=\"14\" height=\"14\"><circle cx=\"7\" cy=\"7\" r=\"3.5\" "
         "fill=\"#dc2626\"/></svg>",
         "send");
    item("<svg width=\"14\" height=\"14\"><path d=\"M2,2 L12,7 L2,12 z\" "
         "fill=\"#0d9488\"/></svg>",
         "receive");
  }
  item("<i class=\"swatch sw-idle\"></i>", "idle (the bubble)");
  item("", "<b>n</b> in a block: its micro-batch");
  os << "</div>\n";
}

void Writer::labels(llvm::raw_ostream &os) {
  os << "<svg class=\"labels\" width=\"" << px(kLabelWidth) << "\" height=\""
     << px(height()) << "\" xmlns=\"http://www.w3.org/2000/svg\">\n";
  os << "<text class=\"lane-sub\" x=\"12\" y=\"" << px(kTop - 12) << "\">time ("
     << (view.flops ? "FLOP of work" : "instructions") << ") \u2192</text>\n";
  for (int64_t s = 0; s < view.p; ++s) {
    const Lane &lane = view.lanes[s];
    std::string title = lane.title;
    if (title.size() > 34)
      title = title.substr(0, 31) + "\u2026";
    os << "<g class=\"lane-label\"><title>" << escape(lane.title) << "\nranks: "
       << llvm::join(
              llvm::map_range(lane.ranks,
                              [](int64_t r) { return std::to_string(r); }),
              ", ")
       << "</title>";
    os << "<text class=\"lane-title\" x=\"12\" y=\""
       << px(g.laneY(s) + kBlockTop + 10) << "\">" << escape(title)
       << "</text>";
    os << "<text class=\"lane-sub\" x=\"12\" y=\""
       << px(g.laneY(s) + kBlockTop + 23) << "\">" << escape(lane.layers)
       << " \u00b7 bubble " << percent(view.timeline.bubble[s])
       << "</text></g>\n";
  }
  os << "</svg>\n";
}

std::string Writer::blockTooltip(int64_t lane,
                                 const pipeline::Interval &interval,
                                 int64_t slot) const {
  const Lane &l = view.lanes[lane];
  bool forward = interval.step.work == pipeline::Work::Forward;
  bool weight = interval.step.work == pipeline::Work::BackwardWeight;
  auto own = l.ownCalls.find({interval.step.work, interval.step.microBatch});
  const FunctionSummary &fn = own != l.ownCalls.end() ? own->second
                              : forward               ? l.forward
                              : weight                ? l.weight
                                                      : l.backward;
  std::string text =
      (view.pipelined ? "stage " + std::to_string(lane) + " \u00b7 "
                      : std::string()) +
      pipeline::workName(interval.step.work).str() + " of micro-batch " +
      std::to_string(interval.step.microBatch);
  if (view.pipelined)
    text += " (slot " + std::to_string(slot) + ")";
  text += "\n" + view.amount(interval.start) + " \u2192 " +
          view.amount(interval.end) + " (" +
          view.amount(interval.end - interval.start) + ")";
  text += "\n" + fn.name +
          (view.pipelined ? std::string()
           : forward      ? " (its forward part)"
                          : " (its backward part)") +
          ": " + std::to_string(fn.instructions) + " instructions, " +
          quantity(fn.flops, "FLOP") + " of matrix products";
  if (fn.receivesPrevious)
    text += "\nreceives from stage " + std::to_string(lane - 1);
  if (fn.receivesNext)
    text += "\nreceives from stage " + std::to_string(lane + 1);
  if (fn.sendsNext)
    text += "\nsends to stage " + std::to_string(lane + 1);
  if (fn.sendsPrevious)
    text += "\nsends to stage " + std::to_string(lane - 1);
  if (!fn.collectives.empty())
    text += "\ncollectives: " + collectiveList(fn);
  return text;
}

void Writer::timeline(llvm::raw_ostream &os) {
  const pipeline::Timeline &t = view.timeline;
  double h = height();
  os << "<svg class=\"timeline\" id=\"timeline\" width=\"" << px(width())
     << "\" height=\"" << px(h) << "\" data-x0=\"" << exact(kX0)
     << "\" data-px-per-unit=\"" << exact(g.scale) << "\" data-step-time=\""
     << exact(t.stepTime) << "\" data-unit=\""
     << (view.flops ? "FLOP" : "instructions")
     << "\" xmlns=\"http://www.w3.org/2000/svg\">\n";
  os << "<defs>\n"
        "<pattern id=\"idle\" width=\"6\" height=\"6\" "
        "patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
        "<rect width=\"6\" height=\"6\" fill=\"#f3f4f6\"/>"
        "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#d9dce1\" "
        "stroke-width=\"3\"/></pattern>\n"
        "<marker id=\"send\" markerWidth=\"8\" markerHeight=\"8\" refX=\"4\" "
        "refY=\"4\" markerUnits=\"userSpaceOnUse\"><circle cx=\"4\" cy=\"4\" "
        "r=\"2.6\" fill=\"#dc2626\"/></marker>\n"
        "<marker id=\"receive\" viewBox=\"0 0 10 10\" markerWidth=\"8\" "
        "markerHeight=\"8\" refX=\"9\" refY=\"5\" orient=\"auto\" "
        "markerUnits=\"userSpaceOnUse\"><path d=\"M0,0 L10,5 L0,10 z\" "
        "fill=\"#0d9488\"/></marker>\n"
        "</defs>\n";

  // The time axis and its grid.
  double spacing = tickSpacing(g.scale);
  os << "<g class=\"axis\">";
  for (int64_t k = 0; k * spacing <= t.stepTime * (1 + 1e-9); ++k) {
    double x = g.x(k * spacing);
    os << "<line x1=\"" << px(x) << "\" y1=\"" << px(kTop - 8) << "\" x2=\""
       << px(x) << "\" y2=\"" << px(h - kBottom + 4) << "\"/>";
    os << "<text x=\"" << px(x) << "\" y=\"" << px(kTop - 12) << "\">"
       << quantity(k * spacing, "") << "</text>";
  }
  os << "</g>\n";

  // Lanes: the idle background, the blocks, the update.
  for (int64_t s = 0; s < view.p; ++s) {
    const Lane &lane = view.lanes[s];
    os << "<g class=\"lane\" data-stage=\"" << s << "\">\n";
    os << "<rect class=\"lane-bg\" x=\"" << px(g.x(0)) << "\" y=\""
       << px(g.blockTop(s)) << "\" width=\"" << px(t.stepTime * g.scale)
       << "\" height=\"" << px(kBlockHeight) << "\"/>\n";
    const std::vector<pipeline::Interval> &intervals = t.ranks[s];
    double laneEnd = 0;
    for (size_t i = 0; i < intervals.size(); ++i) {
      const pipeline::Interval &interval = intervals[i];
      laneEnd = std::max(laneEnd, interval.end);
      double x = g.x(interval.start);
      double w = std::max((interval.end - interval.start) * g.scale, 1.0);
      int64_t slot = i < lane.stepSlots.size() ? lane.stepSlots[i] : 0;
      os << "<g class=\"block " << workClass(interval.step.work)
         << "\" data-stage=\"" << s << "\" data-micro-batch=\""
         << interval.step.microBatch << "\" data-start=\""
         << exact(interval.start) << "\" data-end=\"" << exact(interval.end)
         << "\"><title>" << escape(blockTooltip(s, interval, slot))
         << "</title><rect x=\"" << px(x) << "\" y=\"" << px(g.blockTop(s))
         << "\" width=\"" << px(w) << "\" height=\"" << px(kBlockHeight)
         << "\" rx=\"2\"/>";
      std::string number = std::to_string(interval.step.microBatch);
      if (w >= 6.2 * number.size() + 3)
        os << "<text x=\"" << px(x + w / 2) << "\" y=\""
           << px(g.blockTop(s) + kBlockHeight / 2 + 3.5) << "\">" << number
           << "</text>";
      os << "</g>\n";
    }
    if (lane.hasUpdate) {
      double x = g.x(laneEnd) + 1, w = kUpdatePx - 2;
      std::string tip =
          (view.pipelined ? "stage " + std::to_string(s) + " \u00b7 "
                          : std::string()) +
          "update: " + lane.update.name + ", " +
          std::to_string(lane.update.instructions) +
          " instructions\ncollectives: " + collectiveList(lane.update, "\n  ");
      tip += "\nstarts after the lane's last step; not timed by the "
             "simulation";
      os << "<g class=\"block update\" data-stage=\"" << s << "\" data-start=\""
         << exact(laneEnd) << "\"><title>" << escape(tip)
         << "</title><rect class=\"body\" x=\"" << px(x) << "\" y=\""
         << px(g.blockTop(s)) << "\" width=\"" << px(w) << "\" height=\""
         << px(kBlockHeight) << "\" rx=\"2\"/>";
      os << "<text x=\"" << px(x + w / 2) << "\" y=\""
         << px(g.blockTop(s) + 12.5) << "\">update</text>";
      for (double at : lane.update.collectivePositions)
        os << "<rect class=\"collective\" x=\"" << px(x + 3 + at * (w - 10))
           << "\" y=\"" << px(g.blockBottom(s) - 6.5) << "\" width=\"4\" "
           << "height=\"4.5\"/>";
      os << "</g>\n";
    }
    os << "</g>\n";
  }

  transfers(os);

  // The end of the simulated step.
  double end = g.x(t.stepTime);
  os << "<line class=\"step-end\" x1=\"" << px(end) << "\" y1=\""
     << px(kTop - 6) << "\" x2=\"" << px(end) << "\" y2=\""
     << px(h - kBottom + 10) << "\"/>";
  os << "<text class=\"step-end-label\" x=\"" << px(end - 4) << "\" y=\""
     << px(h - 8) << "\">predicted step: " << view.amount(t.stepTime)
     << "</text>\n";
  os << "</svg>\n";
}

void Writer::transfers(llvm::raw_ostream &os) {
  const pipeline::Timeline &t = view.timeline;
  if (!view.pipelined || view.p < 2)
    return;
  // Per lane and micro-batch: its forward and its backward (the input
  // gradient, what the previous stage waits for) intervals.
  std::vector<std::map<std::pair<bool, int64_t>, const pipeline::Interval *>>
      at(view.p);
  for (int64_t s = 0; s < view.p; ++s)
    for (const pipeline::Interval &i : t.ranks[s])
      if (i.step.work != pipeline::Work::BackwardWeight)
        at[s][{i.step.work == pipeline::Work::Forward, i.step.microBatch}] = &i;
  os << "<g class=\"transfers\">\n";
  auto arrow = [&](double x1, double y1, double x2, double y2, bool send,
                   bool receive, const std::string &tip) {
    os << "<line class=\"xfer\" x1=\"" << px(x1) << "\" y1=\"" << px(y1)
       << "\" x2=\"" << px(x2) << "\" y2=\"" << px(y2) << "\"";
    if (send)
      os << " marker-start=\"url(#send)\"";
    if (receive)
      os << " marker-end=\"url(#receive)\"";
    os << "><title>" << escape(tip) << "</title></line>\n";
  };
  for (int64_t s = 0; s < view.p; ++s) {
    const Lane &lane = view.lanes[s];
    for (int64_t i = 0; i < view.m; ++i) {
      // Activations down: the end of s's forward to the start of s + 1's.
      if (s + 1 < view.p) {
        const Lane &next = view.lanes[s + 1];
        const pipeline::Interval *from = at[s][{true, i}];
        const pipeline::Interval *to = at[s + 1][{true, i}];
        bool send = lane.forward.sendsNext > 0;
        bool receive = next.forward.receivesPrevious > 0;
        if (from && to && (send || receive))
          arrow(g.x(from->end), g.blockBottom(s), g.x(to->start),
                g.blockTop(s + 1), send, receive,
                "activations of micro-batch " + std::to_string(i) + ": stage " +
                    std::to_string(s) + " \u2192 stage " +
                    std::to_string(s + 1));
      }
      // Gradients up: the end of s's backward to the start of s - 1's.
      if (s > 0) {
        const Lane &previous = view.lanes[s - 1];
        const pipeline::Interval *from = at[s][{false, i}];
        const pipeline::Interval *to = at[s - 1][{false, i}];
        bool send = lane.backward.sendsPrevious > 0;
        bool receive = previous.backward.receivesNext > 0;
        if (from && to && (send || receive))
          arrow(g.x(from->end), g.blockTop(s), g.x(to->start),
                g.blockBottom(s - 1), send, receive,
                "gradients of micro-batch " + std::to_string(i) + ": stage " +
                    std::to_string(s) + " \u2192 stage " +
                    std::to_string(s - 1));
      }
    }
  }
  os << "</g>\n";
}

void Writer::laneTable(llvm::raw_ostream &os) {
  const pipeline::Timeline &t = view.timeline;
  os << "<table class=\"lanes\"><tr><th>lane</th><th>ranks</th>"
        "<th>layers</th><th>forward</th><th>backward</th><th>busy</th>"
        "<th>idle</th><th>bubble</th><th>peak micro-batches in flight</th>"
     << (view.pipelined ? "<th>slots</th>" : "")
     << "<th>collectives in the update</th></tr>\n";
  for (int64_t s = 0; s < view.p; ++s) {
    const Lane &lane = view.lanes[s];
    auto cost = [&](const FunctionSummary &f) {
      return view.amount(view.flops ? f.flops : double(f.instructions));
    };
    os << "<tr><td>"
       << (view.pipelined ? "stage " + std::to_string(s)
                          : std::string("micro_step"))
       << "</td><td>" << rankList(lane.ranks) << "</td><td>"
       << escape(lane.layers) << "</td><td>" << cost(lane.forward)
       << "</td><td>" << cost(lane.backward)
       << (lane.split ? " + W " + cost(lane.weight) : std::string())
       << "</td><td>" << view.amount(t.busy[s]) << "</td><td>"
       << view.amount(t.idle(s)) << "</td><td>" << percent(t.bubble[s])
       << "</td><td>" << t.peakInFlight[s] << "</td>";
    if (view.pipelined)
      os << "<td>" << lane.slots << "</td>";
    os << "<td>" << escape(updateCollectives(lane)) << "</td></tr>\n";
  }
  os << "</table>\n";
}

std::string Writer::page() {
  std::string out;
  llvm::raw_string_ostream os(out);
  // The size a screenshot needs to show it all (scripts/render-schedule.sh).
  double pageWidth = kLabelWidth + width() + 2 * 22 + 4;
  double pageHeight = 250 + height() + 60 + 24 * view.p + 30;
  os << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "
        "charset=\"utf-8\">\n"
     << "<!-- braid-view-size: " << int(std::ceil(pageWidth)) << "x"
     << int(std::ceil(pageHeight)) << " -->\n"
     << "<title>Schedule of "
     << escape(options.source.empty() ? "a plan" : options.source)
     << "</title>\n<style>" << kStyle << "</style>\n</head>\n<body>\n";
  header(os);
  legend(os);
  os << "<div class=\"chart\">\n";
  labels(os);
  os << "<div class=\"scroll\">\n";
  timeline(os);
  os << "</div>\n</div>\n";
  laneTable(os);
  os << "<p class=\"note\">Hover a block for its function, its times and "
        "what it sends, receives and reduces. Generated by <code>braid "
        "view</code>.</p>\n";
  os << "</body>\n</html>\n";
  return out;
}

} // namespace

std::string writePage(const bp::Plan &plan, const View &view,
                      const ScheduleViewOptions &options) {
  return Writer(plan, view, options).page();
}

} // namespace braid::scheduleview
