#include "tests/support/test_ca.h"

#include <openssl/sha.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "tests/support/server_process.h"

namespace blockread::testing {
namespace {

constexpr char kNewKey[] = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

// Runs an openssl command line (through sh, for its word splitting); errors carry its output.
absl::Status Openssl(const std::string& arguments, const std::string& log) {
  const ProcessExit exit =
      RunToExit({"/bin/sh", "-c", absl::StrCat("openssl ", arguments)}, log, 60);
  if (WIFEXITED(exit.status) && WEXITSTATUS(exit.status) == 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("openssl ", arguments, " failed:\n", exit.output));
}

}  // namespace

absl::StatusOr<TestCa> TestCa::Create(const std::string& dir, const std::string& name) {
  TestCa ca;
  ca.dir_ = dir + "/" + name;
  std::filesystem::create_directories(ca.dir_);
  ca.ca_pem_ = ca.dir_ + "/ca.pem";
  if (absl::Status s =
          Openssl(absl::StrCat("req -x509 ", kNewKey, " -keyout ", ca.dir_, "/ca.key -out ",
                               ca.ca_pem_, " -days 30 -subj /CN=", name),
                  ca.dir_ + "/openssl.log");
      !s.ok()) {
    return s;
  }
  std::ofstream(ca.dir_ + "/index.txt").flush();
  std::ofstream(ca.dir_ + "/serial") << "01\n";
  std::ofstream(ca.dir_ + "/ca.cnf") << absl::StrCat(
      "[ ca ]\ndefault_ca = this\n[ this ]\ndatabase = ", ca.dir_,
      "/index.txt\nnew_certs_dir = ", ca.dir_, "\nserial = ", ca.dir_,
      "/serial\ndefault_md = sha256\npolicy = any\nunique_subject = no\n"
      "[ any ]\ncommonName = supplied\n"
      "[ server ]\nsubjectAltName = IP:127.0.0.1,DNS:localhost\nextendedKeyUsage = serverAuth\n"
      "[ client ]\nextendedKeyUsage = clientAuth\n");
  return ca;
}

absl::StatusOr<IssuedCert> TestCa::Issue(const std::string& common_name,
                                         const std::string& extensions, const std::string& out_dir,
                                         const std::string& base, bool expired) const {
  std::filesystem::create_directories(out_dir);
  IssuedCert issued{out_dir + "/" + base + ".pem", out_dir + "/" + base + ".key"};
  const std::string csr = out_dir + "/" + base + ".csr";
  const std::string log = out_dir + "/" + base + ".openssl.log";
  if (absl::Status s = Openssl(absl::StrCat("req -new ", kNewKey, " -keyout ", issued.key, " -out ",
                                            csr, " -subj /CN=", common_name),
                               log);
      !s.ok()) {
    return s;
  }
  const std::string validity =
      expired ? "-startdate 20200101000000Z -enddate 20200102000000Z" : "-days 30";
  if (absl::Status s =
          Openssl(absl::StrCat("ca -batch -notext -config ", dir_, "/ca.cnf -cert ", ca_pem_,
                               " -keyfile ", dir_, "/ca.key -in ", csr, " -out ", issued.cert,
                               " -extensions ", extensions, " ", validity),
                  log);
      !s.ok()) {
    return s;
  }
  return issued;
}

absl::StatusOr<IssuedCert> TestCa::IssueServer(const std::string& common_name,
                                               const std::string& out_dir) const {
  return Issue(common_name, "server", out_dir, "server", /*expired=*/false);
}

absl::StatusOr<IssuedCert> TestCa::IssueClient(const std::string& common_name,
                                               const std::string& out_dir, bool expired) const {
  return Issue(common_name, "client", out_dir, common_name, expired);
}

std::string TokenSha256Hex(const std::string& token) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest);
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(digest), sizeof(digest)));
}

}  // namespace blockread::testing
