// A certificate authority made for one test with the openssl command line: a CA, server
// certificates for 127.0.0.1/localhost, client certificates by common name, expired ones.
#ifndef BLOCKREAD_TESTS_SUPPORT_TEST_CA_H_
#define BLOCKREAD_TESTS_SUPPORT_TEST_CA_H_

#include <string>

#include "absl/status/statusor.h"

namespace blockread::testing {

// Lowercase hex SHA-256 of `token`: what an --auth file's token_sha256 holds for it.
std::string TokenSha256Hex(const std::string& token);

// PEM files of one issued certificate.
struct IssuedCert {
  std::string cert;  // path of the certificate
  std::string key;   // path of its private key
};

class TestCa {
 public:
  // A new CA (P-256, valid 30 days) with its files under `dir`/`name`/.
  static absl::StatusOr<TestCa> Create(const std::string& dir, const std::string& name);

  const std::string& ca_pem() const { return ca_pem_; }

  // A server certificate for IP 127.0.0.1 and DNS localhost, CN `common_name`, into
  // `out_dir`/server.pem and server.key (out_dir is created).
  absl::StatusOr<IssuedCert> IssueServer(const std::string& common_name,
                                         const std::string& out_dir) const;
  // A client certificate with CN `common_name` as `out_dir`/`common_name`.pem/.key; `expired`
  // makes it valid only in January 2020.
  absl::StatusOr<IssuedCert> IssueClient(const std::string& common_name, const std::string& out_dir,
                                         bool expired = false) const;

 private:
  absl::StatusOr<IssuedCert> Issue(const std::string& common_name, const std::string& extensions,
                                   const std::string& out_dir, const std::string& base,
                                   bool expired) const;
  std::string dir_;
  std::string ca_pem_;
};

}  // namespace blockread::testing

#endif  // BLOCKREAD_TESTS_SUPPORT_TEST_CA_H_
