#include "platform/test_util/fake_file_system.h"

#include <filesystem>
#include <iterator>
#include <utility>

#include "absl/strings/str_cat.h"

namespace castserve::platform {
namespace {

namespace fs = std::filesystem;

// Symlinks followed in a row before a path is taken as it stands.
constexpr int kMaxSymlinkHops = 16;

std::string Normal(const std::string& path) {
  std::string normal = fs::path(path).lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  return normal;
}

std::string Parent(const std::string& path) {
  return fs::path(path).parent_path().string();
}

absl::Status Missing(const std::string& path, absl::string_view what) {
  return absl::NotFoundError(
      absl::StrCat(path, ": ", what, ": No such file or directory"));
}

}  // namespace

void FakeFileSystem::AddFile(const std::string& path, std::string contents,
                             int64_t mtime_ns) {
  absl::MutexLock lock(&mu_);
  const std::string normal = Normal(path);
  AddDirectoryLocked(Parent(normal));
  files_[normal] = File{std::move(contents), mtime_ns};
}

void FakeFileSystem::AddDirectory(const std::string& path) {
  absl::MutexLock lock(&mu_);
  AddDirectoryLocked(Normal(path));
}

void FakeFileSystem::AddSymlink(const std::string& link,
                                const std::string& target) {
  absl::MutexLock lock(&mu_);
  const std::string normal = Normal(link);
  AddDirectoryLocked(Parent(normal));
  symlinks_[normal] = Normal(target);
}

void FakeFileSystem::FailOn(const std::string& path, absl::StatusCode code,
                            absl::string_view problem) {
  absl::MutexLock lock(&mu_);
  const std::string normal = Normal(path);
  failures_[normal] = absl::Status(code, absl::StrCat(normal, ": ", problem));
}

void FakeFileSystem::AddDirectoryLocked(const std::string& path) {
  for (std::string dir = path; !dir.empty(); dir = Parent(dir)) {
    if (!directories_.insert(dir).second || dir == "/") return;
  }
}

std::string FakeFileSystem::Resolve(const std::string& path) const {
  std::string current = Normal(path);
  for (int hop = 0; hop < kMaxSymlinkHops; ++hop) {
    const fs::path parts(current);
    fs::path prefix;
    bool followed = false;
    for (auto part = parts.begin(); part != parts.end() && !followed; ++part) {
      prefix /= *part;
      auto link = symlinks_.find(prefix.string());
      if (link == symlinks_.end()) continue;
      fs::path rest;
      for (auto tail = std::next(part); tail != parts.end(); ++tail) {
        rest /= *tail;
      }
      current = Normal((fs::path(link->second) / rest).string());
      followed = true;
    }
    if (!followed) return current;
  }
  return current;
}

std::set<std::string> FakeFileSystem::ChildrenLocked(
    const std::string& resolved) const {
  std::set<std::string> names;
  auto add_if_child = [&](const std::string& path) {
    if (path != resolved && Parent(path) == resolved) {
      names.insert(fs::path(path).filename().string());
    }
  };
  for (const auto& [path, file] : files_) add_if_child(path);
  for (const std::string& path : directories_) add_if_child(path);
  for (const auto& [path, target] : symlinks_) add_if_child(path);
  return names;
}

absl::StatusOr<FileSystem::FileInfo> FakeFileSystem::Stat(
    const std::string& path) {
  std::string resolved;
  {
    absl::MutexLock lock(&mu_);
    resolved = Resolve(path);
    if (auto it = failures_.find(resolved); it != failures_.end()) {
      return it->second;
    }
    if (auto it = files_.find(resolved); it != files_.end()) {
      return FileInfo{FileType::kRegular, it->second.contents.size(),
                      it->second.mtime_ns};
    }
    if (directories_.count(resolved) > 0) {
      return FileInfo{FileType::kDirectory, 0, 0};
    }
  }
  if (fallback_ != nullptr) return fallback_->Stat(resolved);
  return Missing(resolved, "cannot stat");
}

absl::StatusOr<std::string> FakeFileSystem::ReadFile(const std::string& path,
                                                     uint64_t max_bytes) {
  std::string resolved;
  {
    absl::MutexLock lock(&mu_);
    resolved = Resolve(path);
    if (auto it = failures_.find(resolved); it != failures_.end()) {
      return it->second;
    }
    if (auto it = files_.find(resolved); it != files_.end()) {
      const uint64_t size_bytes = it->second.contents.size();
      if (size_bytes > max_bytes) {
        return absl::OutOfRangeError(absl::StrCat(resolved, ": ", size_bytes,
                                                  " bytes, above the limit of ",
                                                  max_bytes));
      }
      return it->second.contents;
    }
    if (directories_.count(resolved) > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(resolved, ": not a regular file"));
    }
  }
  if (fallback_ != nullptr) return fallback_->ReadFile(resolved, max_bytes);
  return Missing(resolved, "cannot open");
}

absl::StatusOr<std::vector<FileSystem::DirectoryEntry>>
FakeFileSystem::ListDirectory(const std::string& path) {
  std::string resolved;
  std::set<std::string> names;
  {
    absl::MutexLock lock(&mu_);
    resolved = Resolve(path);
    if (auto it = failures_.find(resolved); it != failures_.end()) {
      return it->second;
    }
    if (files_.count(resolved) > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(resolved, ": not a directory"));
    }
    if (directories_.count(resolved) == 0) {
      if (fallback_ != nullptr) return fallback_->ListDirectory(resolved);
      return Missing(resolved, "cannot list");
    }
    names = ChildrenLocked(resolved);
  }
  std::vector<DirectoryEntry> entries;
  for (const std::string& name : names) {
    absl::StatusOr<FileInfo> info = Stat((fs::path(resolved) / name).string());
    entries.push_back({name, info.ok() ? info->type : FileType::kOther});
  }
  return entries;  // `names` is sorted.
}

absl::StatusOr<std::string> FakeFileSystem::RealPath(const std::string& path) {
  std::string resolved;
  {
    absl::MutexLock lock(&mu_);
    resolved = Resolve(path);
    if (auto it = failures_.find(resolved); it != failures_.end()) {
      return it->second;
    }
    if (files_.count(resolved) > 0 || directories_.count(resolved) > 0) {
      return resolved;
    }
  }
  if (fallback_ != nullptr) return fallback_->RealPath(resolved);
  return Missing(resolved, "cannot resolve");
}

absl::StatusOr<std::unique_ptr<MappedFile>> FakeFileSystem::OpenMapped(
    const std::string& path) {
  std::string resolved;
  {
    absl::MutexLock lock(&mu_);
    resolved = Resolve(path);
    if (auto it = failures_.find(resolved); it != failures_.end()) {
      return it->second;
    }
    if (files_.count(resolved) > 0) {
      return absl::UnimplementedError(
          absl::StrCat(resolved, ": in-memory files cannot be mapped"));
    }
    if (directories_.count(resolved) > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(resolved, ": not a regular file"));
    }
  }
  if (fallback_ != nullptr) return fallback_->OpenMapped(resolved);
  return Missing(resolved, "cannot open");
}

}  // namespace castserve::platform
