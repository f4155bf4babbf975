#include "trainer/algorithms/outer.h"

#include <algorithm>
#include <cmath>

#include "trainer/algorithms/batch_schedule.h"

namespace narrows::trainer {

namespace {

using core::Doc;

const core::KeyBlock kOuter("an entry's outer step",
                            "H inner steps between outer steps, the outer optimiser, and how pseudo-gradients travel.");
const core::IntKey kInnerSteps(kOuter, "inner_steps", 50, 1, core::kNoMax,
                               Doc("H: inner steps between outer steps (Streaming DiLoCo: each fragment every H)", "steps"));
const core::EnumKey<OuterOptimizer> kOuterOptimizer(
    kOuter, "outer_optimizer",
    {{"sgd", OuterOptimizer::kSgd}, {"nesterov", OuterOptimizer::kNesterov}, {"adam", OuterOptimizer::kAdam}},
    OuterOptimizer::kNesterov, Doc("the outer optimiser applied to the averaged pseudo-gradient (adam: beta 0.9/0.999)"));
const core::NumberKey kOuterLr(kOuter, "outer_lr", 0.7, 0.0, 100.0, Doc("outer learning rate", "", "0.7 (0.1 with adam)"),
                               core::Bound::kExclusive);
const core::NumberKey kOuterMomentum(kOuter, "outer_momentum", 0.9, 0.0, 0.9999,
                                     Doc("outer momentum (adam: beta1)", "", "0.9 (0 with sgd)"));
const core::ChoiceKey kOuterGradient(kOuter, "outer_gradient", {}, "fp32",
                                     Doc("how pseudo-gradients travel: a codec's name, or a codec block {format: ...}"),
                                     "a registered codec (narrows algorithms), or a mapping");

const core::KeyBlock kBatch("an entry's batch", "An adaptive batch size (Lau et al., arXiv 2412.21124): the multiple of "
                            "train.batch_size one update accumulates; steps count base batches.");
const core::EnumKey<BatchScheduleKind> kBatchSchedule(
    kBatch, "schedule",
    {{"constant", BatchScheduleKind::kConstant}, {"linear", BatchScheduleKind::kLinear}, {"norm-test", BatchScheduleKind::kNormTest}},
    BatchScheduleKind::kConstant,
    Doc("constant; linear from 1 to max_multiple over ramp_steps; or the norm test every test_every updates"));
const core::IntKey kMaxMultiple(kBatch, "max_multiple", 8, 1, 1 << 20, Doc("the largest multiple"));
const core::IntKey kRampSteps(kBatch, "ramp_steps", 0, 0, core::kNoMax, Doc("linear: the ramp's length; 0: half the run",
                                                                            "steps"));
const core::IntKey kTestEvery(kBatch, "test_every", 10, 1, core::kNoMax, Doc("norm-test: updates between tests"));
const core::NumberKey kEta(kBatch, "eta", 0.2, 0.0, 1e6, Doc("norm-test: grow when the gradient noise exceeds eta^2"),
                           core::Bound::kExclusive);

}  // namespace

void ReadOuterOptions(core::OptionReader& r, OuterOptions* o) {
  o->inner_steps = r.Int(kInnerSteps, o->inner_steps);
  o->outer_optimizer = r.Enum(kOuterOptimizer, o->outer_optimizer);
  o->outer_lr = r.Double(kOuterLr, o->outer_optimizer == OuterOptimizer::kAdam ? 0.1 : 0.7);
  o->outer_momentum = r.Double(kOuterMomentum, o->outer_optimizer == OuterOptimizer::kSgd ? 0.0 : 0.9);
  o->outer_gradient = core::ReadCodec(r, kOuterGradient);
}

BatchOptions ReadBatchOptions(core::OptionReader& entry, const core::StructureKey& key) {
  BatchOptions b;
  if (!entry.Has(key.info.name)) return b;
  core::OptionReader r = entry.Sub(key);
  b.schedule = r.Enum(kBatchSchedule);
  b.max_multiple = r.Int(kMaxMultiple);
  b.ramp_steps = r.Int(kRampSteps);
  b.test_every = r.Int(kTestEvery);
  b.eta = r.Double(kEta);
  r.Finish();
  return b;
}

std::optional<core::ShorthandKeys> InnerStepsShorthand(const std::string& prefix, const std::string& text) {
  if (text == prefix) return core::ShorthandKeys{{"inner_steps", "50"}};
  if (text.rfind(prefix + "-h", 0) != 0) return std::nullopt;
  const std::string digits = text.substr(prefix.size() + 2);
  try {
    size_t used = 0;
    const long long h = std::stoll(digits, &used);
    if (used != digits.size() || h <= 0) return std::nullopt;
    return core::ShorthandKeys{{"inner_steps", std::to_string(h)}};
  } catch (...) {
    return std::nullopt;
  }
}

bool AllFinite(const float* v, int64_t n) {
  return std::all_of(v, v + n, [](float x) { return std::isfinite(x); });
}

std::string RoundsName(const std::string& algorithm, const OuterOptions& o) {
  return algorithm + "-h" + std::to_string(o.inner_steps);
}

int64_t DyluInnerSteps(int64_t inner_steps, double fastest_step_s, double own_step_s) {
  if (fastest_step_s <= 0 || own_step_s <= 0) return inner_steps;
  return std::clamp<int64_t>(static_cast<int64_t>(static_cast<double>(inner_steps) * fastest_step_s / own_step_s + 1e-9),
                             1, inner_steps);
}

PlanRow PredictOuterRounds(const PlanInputs& in, int64_t inner_steps, int64_t fragments, double overlap_steps,
                           const core::CodecSpec& codec, core::CollectiveKind collective) {
  const int m = in.workers();
  const core::Codec wire(codec);
  const double rounds = std::ceil(in.steps / static_cast<double>(inner_steps));
  const double fragment = std::ceil(in.workload.params / static_cast<double>(fragments));
  const double tail = 4.0 * (1 + m);  // the contributor count and the votes, as fp32
  const double bytes = static_cast<double>(wire.EncodedBytes(static_cast<int64_t>(fragment))) + tail;
  // What each worker sends per synchronisation, and how long the exchange takes (core/collectives.h).
  double reduce = 0.0, sent = 0.0;
  const double gather = static_cast<double>(wire.gather().EncodedBytes(static_cast<int64_t>(fragment))) + tail;
  const std::vector<int> leaders = in.IslandLeaders();
  if (wire.lossless()) {
    reduce = in.AllReduceSeconds(bytes, collective);
    sent = 2.0 * (m - 1) / m * bytes;  // every fp32 collective (plan.h)
  } else if (collective == core::CollectiveKind::kHierarchical && !leaders.empty()) {
    // fp32 inside each island, the codec among the leaders alone (core/collectives.h): a member sends
    // the island's leader its buffer, a leader its encoded share among the leaders and the result
    // to each member.
    const double fp32 = 4.0 * fragment + tail, l = static_cast<double>(leaders.size());
    double among = 0.0, ring_sent = 0.0;
    if (wire.sparse()) {
      among = in.AllGatherSeconds(bytes, leaders);
      ring_sent = (l - 1) * bytes;
    } else {
      among = in.ConcurrentRingsSeconds({leaders}, 0.5 * (bytes + gather), &ring_sent);
      ring_sent = (l - 1) / l * (bytes + gather);
    }
    reduce = in.IslandsSeconds(fp32, among);
    sent = (2.0 * (m - l) * fp32 + l * ring_sent) / m;
  } else if (wire.sparse()) {
    reduce = in.AllGatherSeconds(bytes);
    sent = (m - 1) * bytes;
  } else {
    reduce = in.AllReduceSeconds(bytes, gather, collective);  // dense formats over the entry's collective
    sent = (m - 1.0) / m * (bytes + gather);
  }
  const double exposed = std::max(0.0, reduce - overlap_steps * in.step_s);
  PlanRow r;
  r.compute_s = in.compute_s;
  r.syncs = static_cast<int64_t>(rounds) * fragments;
  // The last synchronisation has no inner steps left to hide behind.
  r.time_s = in.critical_compute_s + static_cast<double>(r.syncs) * exposed + (reduce - exposed);
  if (!wire.sparse() && collective == core::CollectiveKind::kRing) {
    // Rounds of H / P inner steps, each ending with one fragment's ring, which runs beside the next
    // tau steps (Streaming DiLoCo; DiLoCo is P = 1, tau = 0), on each worker's clock.
    const double spacing = static_cast<double>(inner_steps) / static_cast<double>(fragments);
    // Rounds of a whole spacing, the last of the steps left where the spacing does not divide them.
    const double whole = std::floor(in.steps / spacing + 1e-9);
    const double rest = std::max(0.0, in.steps - whole * spacing);
    r.time_s = in.BucketedRingRoundsSeconds({bytes}, {1.0}, spacing * in.nominal_step_s, whole + (rest > 0 ? 1 : 0),
                                            (wire.lossless() ? bytes : gather) / bytes, overlap_steps * in.nominal_step_s,
                                            rest > 0 ? rest * in.nominal_step_s : -1.0);
  }
  r.bytes_per_worker = static_cast<double>(r.syncs) * sent;
  return r;
}

}  // namespace narrows::trainer
