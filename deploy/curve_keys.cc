#include "deploy/curve_keys.h"

#include <sys/stat.h>
#include <unistd.h>

#include <zmq.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace narrows::deploy {

using core::Status;

core::Result<CurveKeys> GenerateCurveKeys() {
  char pub[41], sec[41];
  if (zmq_curve_keypair(pub, sec) != 0) {
    return Status::Internal("zmq_curve_keypair failed: this libzmq has no CURVE support");
  }
  return CurveKeys{pub, sec};
}

core::Result<CurveKeys> ReadKeyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::NotFound(path + ": cannot open the key file");
  CurveKeys keys;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos && line.find('"') == std::string::npos) continue;  // a section name
    const auto q1 = line.find('"'), q2 = line.rfind('"');
    if (eq == std::string::npos || q1 == std::string::npos || q2 <= q1) {
      return Status::InvalidArgument(path + ":" + std::to_string(line_no) + ": expected name = \"key\"");
    }
    std::string name = line.substr(first, eq - first);
    name.erase(name.find_last_not_of(" \t") + 1);
    const std::string value = line.substr(q1 + 1, q2 - q1 - 1);
    if (name != "public-key" && name != "secret-key") continue;  // metadata of a zcert file
    if (value.size() != 40) {
      return Status::InvalidArgument(path + ":" + std::to_string(line_no) + ": " + name +
                                     " must be 40 Z85 characters, got " + std::to_string(value.size()));
    }
    (name == "public-key" ? keys.public_key : keys.secret_key) = value;
  }
  if (keys.public_key.empty() || keys.secret_key.empty()) {
    return Status::InvalidArgument(path + ": needs both public-key and secret-key (narrows keygen writes one)");
  }
  char derived[41];
  if (zmq_curve_public(derived, keys.secret_key.c_str()) != 0 || keys.public_key != derived) {
    return Status::InvalidArgument(path + ": public-key does not belong to secret-key");
  }
  return keys;
}

Status WriteNewKeyFile(const std::string& path) {
  auto keys = GenerateCurveKeys();
  if (!keys.ok()) return keys.status();
  FILE* f = std::fopen(path.c_str(), "wx");  // fails if it exists
  if (!f) return Status::IoError(path + ": cannot create the key file (" + std::strerror(errno) + ")");
  ::fchmod(fileno(f), 0600);
  std::fprintf(f, "# narrows CURVE key pair: every process of a run needs this file; keep it secret\n"
                  "curve\n    public-key = \"%s\"\n    secret-key = \"%s\"\n",
               keys->public_key.c_str(), keys->secret_key.c_str());
  const bool ok = std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  std::fclose(f);
  return ok ? Status::Ok() : Status::IoError(path + ": write failed");
}

}  // namespace narrows::deploy
