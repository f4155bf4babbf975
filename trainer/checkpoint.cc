#include "trainer/checkpoint.h"

#include <nlohmann/json.hpp>
#include <zlib.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include "core/run_writer.h"
#include "trainer/replica.h"

namespace narrows::trainer {
namespace {

constexpr char kMagic[4] = {'N', 'R', 'W', 'C'};
constexpr uint32_t kVersion = 1;

uint32_t Crc(const std::string& bytes, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (size_t off = 0; off < n;) {
    const auto chunk = static_cast<uInt>(std::min<size_t>(n - off, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + off), chunk);
    off += chunk;
  }
  return static_cast<uint32_t>(crc);
}

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

}  // namespace

std::string CheckpointPath(const std::string& dir, int rank) {
  return dir + "/rank-" + std::to_string(rank) + ".ckpt";
}

core::Status WriteCheckpoint(const std::string& path, const WorkerCheckpoint& c) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& [name, t] : c.tensors) tensors.push_back({{"name", name}, {"numel", t.numel()}});
  const nlohmann::json header = {{"rank", c.rank},           {"step", c.step},       {"outer_steps", c.outer_steps},
                                 {"inner_steps", c.inner_steps}, {"failures", c.failures}, {"group", c.group},
                                 {"clock_s", c.clock_s},     {"drop_rng", c.drop_rng}, {"part", c.part},
                                 {"compute_s", c.compute_s}, {"comm_s", c.comm_s}, {"idle_s", c.idle_s},
                                 {"bytes_sent", c.bytes_sent}, {"bytes_received", c.bytes_received},
                                 {"tensors", tensors}};
  const std::string text = header.dump();
  std::string out(kMagic, 4);
  Put<uint32_t>(out, kVersion);
  Put<uint64_t>(out, text.size());
  out += text;
  for (const auto& [name, t] : c.tensors) {
    const auto host = t.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    out.append(static_cast<const char*>(host.data_ptr()), static_cast<size_t>(host.numel()) * sizeof(float));
  }
  Put<uint32_t>(out, Crc(out, out.size()));
  return core::WriteFileAtomic(path, out);
}

core::Result<WorkerCheckpoint> ReadCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return core::Status::NotFound(path + ": cannot open the checkpoint");
  std::stringstream buf;
  buf << in.rdbuf();
  const std::string bytes = buf.str();
  auto bad = [&](const std::string& what) { return core::Status::InvalidArgument(path + ": " + what); };
  if (bytes.size() < 20 || std::memcmp(bytes.data(), kMagic, 4) != 0) return bad("not a narrows checkpoint");
  uint32_t version = 0, crc = 0;
  uint64_t text_size = 0;
  std::memcpy(&version, bytes.data() + 4, 4);
  if (version != kVersion) return bad("checkpoint version " + std::to_string(version) + ", this build reads 1");
  std::memcpy(&crc, bytes.data() + bytes.size() - 4, 4);
  if (Crc(bytes, bytes.size() - 4) != crc) return bad("checksum mismatch: the file is truncated or corrupt");
  std::memcpy(&text_size, bytes.data() + 8, 8);
  if (text_size > bytes.size() - 20) return bad("header length runs past the end");
  WorkerCheckpoint c;
  size_t off = 16 + text_size;
  try {
    const auto h = nlohmann::json::parse(bytes.substr(16, text_size));
    c.rank = h.at("rank");
    c.step = h.at("step");
    c.outer_steps = h.at("outer_steps");
    // Older files name the count adam_steps.
    c.inner_steps = h.contains("inner_steps") ? h.at("inner_steps") : h.at("adam_steps");
    c.failures = h.at("failures");
    c.group = h.at("group").get<std::vector<int>>();
    c.clock_s = h.at("clock_s");
    c.compute_s = h.at("compute_s");
    c.comm_s = h.at("comm_s");
    c.idle_s = h.at("idle_s");
    c.bytes_sent = h.at("bytes_sent");
    c.bytes_received = h.at("bytes_received");
    c.drop_rng = h.at("drop_rng");
    c.part = h.at("part");
    for (const auto& t : h.at("tensors")) {
      const int64_t numel = t.at("numel");
      const size_t n = static_cast<size_t>(numel) * sizeof(float);
      if (numel < 0 || off + n > bytes.size() - 4) return bad("tensor " + t.at("name").get<std::string>() + " runs past the end");
      auto tensor = torch::empty({numel}, torch::kFloat32);
      std::memcpy(tensor.data_ptr(), bytes.data() + off, n);
      off += n;
      c.tensors.emplace_back(t.at("name"), tensor);
    }
  } catch (const std::exception& e) {
    return bad(std::string("malformed header: ") + e.what());
  }
  if (off != bytes.size() - 4) return bad("trailing bytes after the tensors");
  return c;
}

core::Status CopyByName(const std::vector<std::pair<std::string, torch::Tensor>>& from,
                        const std::vector<std::pair<std::string, torch::Tensor*>>& into, const std::string& what) {
  if (from.size() != into.size()) {
    return core::Status::InvalidArgument(what + ": " + std::to_string(from.size()) + " tensors, this run " +
                                         std::to_string(into.size()) + " (another algorithm, optimiser or model?)");
  }
  for (size_t i = 0; i < into.size(); ++i) {
    if (from[i].first != into[i].first) {
      return core::Status::InvalidArgument(what + ": tensor " + std::to_string(i) + " is " + from[i].first +
                                           ", this run's " + into[i].first + " (another algorithm or optimiser?)");
    }
    if (from[i].second.numel() != into[i].second->numel()) {
      return core::Status::InvalidArgument(what + ": tensor " + from[i].first + " has " +
                                           std::to_string(from[i].second.numel()) + " values, this run's " +
                                           std::to_string(into[i].second->numel()) + " (another model?)");
    }
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < into.size(); ++i) into[i].second->copy_(from[i].second.to(into[i].second->device()));
  return core::Status::Ok();
}

core::Status WriteModelFile(const std::string& path, Replica& replica, int64_t steps, double val_loss) {
  WorkerCheckpoint c;
  c.step = steps;
  c.inner_steps = replica.optimizer().steps_taken();
  c.clock_s = val_loss;  // the model's validation loss, for whoever reads the file
  c.tensors.emplace_back("params", replica.model().flat_params());
  for (const auto& [name, t] : replica.optimizer().State()) c.tensors.emplace_back(name, *t);
  return WriteCheckpoint(path, c);
}

core::Result<WorkerCheckpoint> ReadModelFile(const std::string& path, int64_t numel) {
  auto c = ReadCheckpoint(path);
  if (!c.ok()) return c.status();
  if (c->tensors.empty() || c->tensors[0].first != "params") {
    return core::Status::InvalidArgument(path + ": not a model file (no params tensor; narrows train writes model.ckpt)");
  }
  if (c->tensors[0].second.numel() != numel) {
    return core::Status::InvalidArgument(path + ": holds " + std::to_string(c->tensors[0].second.numel()) +
                                         " parameters, the scenario's model " + std::to_string(numel) +
                                         " (another model?)");
  }
  return std::move(*c);
}

}  // namespace narrows::trainer
