// Measures how long opening a checkpoint takes against its size. Opening
// reads headers only, so the time should track the tensor count, not the
// bytes. Files are sparse (ftruncate), so the data is never written or read.
//
//   bazel run //benchmarks:checkpoint_open_benchmark -- [scratch_dir] [repeats]
//
// Prints one row per checkpoint: size, tensor and file counts, the first open
// after dropping the files' cached pages (posix_fadvise DONTNEED), the median
// and best of `repeats` warm opens, and the data bytes resident afterwards.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "casting/formats/safetensors_reader.h"
#include "casting/formats/test_util/safetensors_writer.h"

namespace castserve::casting {
namespace {

using test_util::HeaderTensor;

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

uint64_t Bf16Bytes(const TensorSpec& t) {
  uint64_t n = 2;
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n;
}

// Llama-3-8B: 32 layers, hidden 4096, 8 KV heads of 128, MLP 14336, vocab
// 128256, untied head: 291 tensors, about 16 GB in bf16.
std::vector<TensorSpec> Llama3_8BTensors() {
  constexpr int64_t kHidden = 4096, kKv = 1024, kMlp = 14336, kVocab = 128256;
  std::vector<TensorSpec> tensors = {
      {"model.embed_tokens.weight", {kVocab, kHidden}}};
  for (int i = 0; i < 32; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    tensors.push_back({p + "input_layernorm.weight", {kHidden}});
    tensors.push_back({p + "self_attn.q_proj.weight", {kHidden, kHidden}});
    tensors.push_back({p + "self_attn.k_proj.weight", {kKv, kHidden}});
    tensors.push_back({p + "self_attn.v_proj.weight", {kKv, kHidden}});
    tensors.push_back({p + "self_attn.o_proj.weight", {kHidden, kHidden}});
    tensors.push_back({p + "post_attention_layernorm.weight", {kHidden}});
    tensors.push_back({p + "mlp.gate_proj.weight", {kMlp, kHidden}});
    tensors.push_back({p + "mlp.up_proj.weight", {kMlp, kHidden}});
    tensors.push_back({p + "mlp.down_proj.weight", {kHidden, kMlp}});
  }
  tensors.push_back({"model.norm.weight", {kHidden}});
  tensors.push_back({"lm_head.weight", {kVocab, kHidden}});
  return tensors;
}

// `count` bf16 matrices of 4096 x 2048 (16 MiB each).
std::vector<TensorSpec> UniformTensors(int count) {
  std::vector<TensorSpec> tensors;
  for (int i = 0; i < count; ++i) {
    tensors.push_back({absl::StrCat("w", i), {4096, 2048}});
  }
  return tensors;
}

// Writes one sparse safetensors file; returns its total size.
uint64_t WriteSparseFile(const std::string& path,
                         const std::vector<TensorSpec>& tensors) {
  std::vector<HeaderTensor> header;
  uint64_t offset = 0;
  for (const TensorSpec& t : tensors) {
    header.push_back({t.name, "BF16", t.shape, offset, offset + Bf16Bytes(t)});
    offset += Bf16Bytes(t);
  }
  const std::string json =
      test_util::MakeHeaderJson(header, {{"format", "pt"}});
  const uint64_t size = 8 + json.size() + offset;
  if (!test_util::WriteSafetensorsFile(path, json, "", size).ok()) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  return size;
}

// Splits `tensors` into `shards` files of about equal size plus an index.
std::vector<std::string> WriteShardedSet(const std::string& dir,
                                         const std::vector<TensorSpec>& tensors,
                                         int shards, uint64_t& total_bytes) {
  uint64_t all = 0;
  for (const TensorSpec& t : tensors) all += Bf16Bytes(t);
  std::vector<std::vector<TensorSpec>> groups(shards);
  uint64_t running = 0;
  for (const TensorSpec& t : tensors) {
    const int shard = std::min<int>(shards - 1, running * shards / all);
    groups[shard].push_back(t);
    running += Bf16Bytes(t);
  }
  std::vector<std::string> files;
  std::vector<std::string> weight_map;
  total_bytes = 0;
  for (int s = 0; s < shards; ++s) {
    const std::string name =
        absl::StrCat("model-0000", s + 1, "-of-0000", shards, ".safetensors");
    total_bytes += WriteSparseFile(dir + "/" + name, groups[s]);
    files.push_back(dir + "/" + name);
    for (const TensorSpec& t : groups[s]) {
      weight_map.push_back(absl::StrCat("\"", t.name, "\":\"", name, "\""));
    }
  }
  const std::string index = dir + "/model.safetensors.index.json";
  (void)test_util::WriteTextFile(
      index,
      absl::StrCat("{\"metadata\":{\"total_size\":", all, "},\"weight_map\":{",
                   absl::StrJoin(weight_map, ","), "}}"));
  files.push_back(index);
  return files;
}

void DropCachedPages(const std::vector<std::string>& files) {
  for (const std::string& file : files) {
    const int fd = open(file.c_str(), O_RDONLY);
    if (fd < 0) continue;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
}

double OpenMilliseconds(
    const std::function<absl::StatusOr<std::unique_ptr<Checkpoint>>()>& open,
    std::unique_ptr<Checkpoint>* keep) {
  const auto start = std::chrono::steady_clock::now();
  auto checkpoint = open();
  const auto stop = std::chrono::steady_clock::now();
  if (!checkpoint.ok()) {
    std::fprintf(stderr, "open failed: %s\n",
                 std::string(checkpoint.status().message()).c_str());
    std::exit(1);
  }
  if (keep != nullptr) *keep = std::move(*checkpoint);
  return std::chrono::duration<double, std::milli>(stop - start).count();
}

uint64_t ResidentDataBytes(const Checkpoint& checkpoint) {
  uint64_t resident = 0;
  for (int i = 0; i < checkpoint.file_count(); ++i) {
    uint64_t first = checkpoint.file(i).size_bytes();
    for (const TensorEntry& e : checkpoint.tensors()) {
      if (e.file_index == i) first = std::min(first, e.offset_bytes);
    }
    resident += checkpoint.file(i).ResidentBytes(first, UINT64_MAX).value_or(0);
  }
  return resident;
}

void Measure(
    const std::string& label, const std::vector<std::string>& files,
    uint64_t total_bytes, int repeats,
    const std::function<absl::StatusOr<std::unique_ptr<Checkpoint>>()>& open) {
  DropCachedPages(files);
  std::unique_ptr<Checkpoint> checkpoint;
  const double cold = OpenMilliseconds(open, &checkpoint);
  std::vector<double> warm;
  for (int i = 0; i < repeats; ++i)
    warm.push_back(OpenMilliseconds(open, nullptr));
  std::sort(warm.begin(), warm.end());
  std::printf(
      "| %-26s | %8.2f | %7zu | %5d | %9.2f | %10.2f | %8.2f | %9llu |\n",
      label.c_str(), total_bytes / 1e9, checkpoint->tensors().size(),
      checkpoint->file_count(), cold, warm[warm.size() / 2], warm[0],
      static_cast<unsigned long long>(ResidentDataBytes(*checkpoint)));
}

int Main(int argc, char** argv) {
  const std::string dir =
      argc > 1 ? argv[1] : "/tmp/castserve_checkpoint_open_benchmark";
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 20;
  std::filesystem::create_directories(dir);
  std::printf("| %-26s | %8s | %7s | %5s | %9s | %10s | %8s | %9s |\n",
              "checkpoint", "size GB", "tensors", "files", "cold ms",
              "median ms", "best ms", "resident");
  std::printf("|%s|\n", std::string(113, '-').c_str());
  for (int gigabytes : {1, 4, 16}) {
    const std::string path =
        absl::StrCat(dir, "/uniform_", gigabytes, "g.safetensors");
    const uint64_t size = WriteSparseFile(path, UniformTensors(64 * gigabytes));
    Measure(absl::StrCat("single file, ", 64 * gigabytes, " tensors"), {path},
            size, repeats, [&] { return OpenSafetensors(path); });
    std::filesystem::remove(path);
  }
  uint64_t total = 0;
  const std::string llama_dir = dir + "/llama3_8b";
  std::filesystem::create_directories(llama_dir);
  const std::vector<std::string> files =
      WriteShardedSet(llama_dir, Llama3_8BTensors(), 4, total);
  Measure("Llama-3-8B shape, 4 shards", files, total, repeats,
          [&] { return OpenSafetensorsIndex(files.back()); });
  std::filesystem::remove_all(llama_dir);
  return 0;
}

}  // namespace
}  // namespace castserve::casting

int main(int argc, char** argv) { return castserve::casting::Main(argc, argv); }
