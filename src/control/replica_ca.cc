#include "control/replica_ca.h"

#include <arpa/inet.h>

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <nlohmann/json.hpp>

namespace aicloud::control {
namespace {

using nlohmann::json;

constexpr char kKind[] = "ClusterKey";
constexpr char kName[] = "replica-ca";
constexpr long kSkewSeconds = 3600;                     // not-before this far back
constexpr long kCaValiditySeconds = 10L * 365 * 86400;  // the CA's

struct Free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
  void operator()(X509_EXTENSION* p) const { X509_EXTENSION_free(p); }
  void operator()(BIGNUM* p) const { BN_free(p); }
};
using Key = std::unique_ptr<EVP_PKEY, Free>;
using Cert = std::unique_ptr<X509, Free>;
using Bio = std::unique_ptr<BIO, Free>;

// The OpenSSL error queue's first entry, for messages (the queue is cleared).
std::string SslError(std::string_view what) {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  char buf[256] = "unknown error";
  if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
  return "replica CA: " + std::string(what) + ": " + buf;
}

StatusOr<Key> NewKey() {
  Key k(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  if (!k) return InternalError(SslError("cannot generate a P-256 key"));
  return k;
}

std::string BioText(BIO* b) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(b, &data);
  return n > 0 ? std::string(data, static_cast<size_t>(n)) : std::string();
}

std::string CertPem(X509* c) {
  Bio b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_X509(b.get(), c) != 1) return "";
  return BioText(b.get());
}

std::string KeyPem(EVP_PKEY* k) {
  Bio b(BIO_new(BIO_s_mem()));
  if (!b || PEM_write_bio_PrivateKey(b.get(), k, nullptr, nullptr, 0, nullptr, nullptr) != 1) return "";
  return BioText(b.get());
}

// Adds extension `nid` = `value` (OpenSSL's config syntax) to `cert`, issued by `issuer`.
bool AddExt(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  std::unique_ptr<X509_EXTENSION, Free> ext(X509V3_EXT_nconf_nid(nullptr, &ctx, nid, value.c_str()));
  return ext && X509_add_ext(cert, ext.get(), -1) == 1;
}

// A certificate for `key`'s public half with subject CN=`cn`, valid for `seconds` from an hour
// ago, with a random 127-bit serial, issued by `issuer` (null: self-issued); not yet signed.
StatusOr<Cert> NewCert(EVP_PKEY* key, const std::string& cn, long seconds, X509* issuer) {
  Cert c(X509_new());
  if (!c) return InternalError(SslError("X509_new"));
  std::unique_ptr<BIGNUM, Free> serial(BN_new());
  if (!serial || BN_rand(serial.get(), 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) != 1 ||
      BN_to_ASN1_INTEGER(serial.get(), X509_get_serialNumber(c.get())) == nullptr) {
    return InternalError(SslError("cannot draw a serial number"));
  }
  X509_NAME* name = X509_get_subject_name(c.get());
  if (X509_set_version(c.get(), 2) != 1 ||
      X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>("aicloud"), -1, -1, 0) != 1 ||
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                 0) != 1 ||
      X509_set_issuer_name(c.get(), issuer ? X509_get_subject_name(issuer) : name) != 1 ||
      X509_gmtime_adj(X509_getm_notBefore(c.get()), -kSkewSeconds) == nullptr ||
      X509_gmtime_adj(X509_getm_notAfter(c.get()), seconds) == nullptr || X509_set_pubkey(c.get(), key) != 1) {
    return InternalError(SslError("cannot fill a certificate"));
  }
  return c;
}

bool IsDnsName(std::string_view s) {
  if (s.empty() || s.size() > 253 || s.front() == '.' || s.front() == '-') return false;
  for (char ch : s) {
    const bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                    ch == '-';
    if (!ok) return false;
  }
  return true;
}

bool IsIp(const std::string& s) {
  unsigned char buf[16];
  return inet_pton(AF_INET, s.c_str(), buf) == 1 || inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

}  // namespace

struct ReplicaCa::Impl {
  Key key;
  Cert cert;
  std::string cert_pem;
};

StatusOr<ReplicaCa> ReplicaCa::Parse(const std::string& cert_pem, const std::string& key_pem) {
  auto impl = std::make_shared<Impl>();
  Bio cb(BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size())));
  Bio kb(BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())));
  if (!cb || !kb) return InternalError(SslError("BIO_new_mem_buf"));
  impl->cert.reset(PEM_read_bio_X509(cb.get(), nullptr, nullptr, nullptr));
  impl->key.reset(PEM_read_bio_PrivateKey(kb.get(), nullptr, nullptr, nullptr));
  if (!impl->cert) return InternalError(SslError(std::string(kKind) + "/" + kName + ": spec.certificate does not parse"));
  if (!impl->key) {
    ERR_clear_error();  // the key's parse error is not shown: it might quote key material
    return InternalError(std::string("replica CA: ") + kKind + "/" + kName + ": spec.key does not parse");
  }
  if (X509_check_private_key(impl->cert.get(), impl->key.get()) != 1) {
    ERR_clear_error();
    return InternalError(std::string("replica CA: ") + kKind + "/" + kName + ": spec.key does not match spec.certificate");
  }
  impl->cert_pem = cert_pem;
  return ReplicaCa(std::move(impl));
}

StatusOr<ReplicaCa> ReplicaCa::Generate() {
  StatusOr<Key> key = NewKey();
  if (!key.ok()) return key.status();
  StatusOr<Cert> cert = NewCert(key->get(), "aicloud replica CA", kCaValiditySeconds, nullptr);
  if (!cert.ok()) return cert.status();
  X509* c = cert->get();
  if (!AddExt(c, c, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") ||
      !AddExt(c, c, NID_key_usage, "critical,keyCertSign,cRLSign") ||
      !AddExt(c, c, NID_subject_key_identifier, "hash")) {
    return InternalError(SslError("cannot add the CA's extensions"));
  }
  if (X509_sign(c, key->get(), EVP_sha256()) <= 0) return InternalError(SslError("cannot sign the CA certificate"));
  auto impl = std::make_shared<Impl>();
  impl->cert_pem = CertPem(c);
  if (impl->cert_pem.empty()) return InternalError(SslError("cannot write the CA certificate"));
  impl->key = std::move(*key);
  impl->cert = std::move(*cert);
  return ReplicaCa(std::move(impl));
}

StatusOr<ReplicaCa> ReplicaCa::Load(store::Store* store) {
  auto from = [](const json& object) -> StatusOr<ReplicaCa> {
    const json spec = object.value("spec", json::object());
    if (!spec.is_object() || !spec.contains("certificate") || !spec["certificate"].is_string() ||
        !spec.contains("key") || !spec["key"].is_string()) {
      return InternalError(std::string("replica CA: ") + kKind + "/" + kName + ": spec.certificate or spec.key is missing");
    }
    return Parse(spec["certificate"].get<std::string>(), spec["key"].get<std::string>());
  };
  StatusOr<json> existing = store->Get({kKind, "", kName});
  if (existing.ok()) return from(*existing);
  if (existing.status().code() != StatusCode::kNotFound) return existing.status();
  StatusOr<ReplicaCa> fresh = Generate();
  if (!fresh.ok()) return fresh.status();
  const std::string key_pem = KeyPem(fresh->impl_->key.get());
  if (key_pem.empty()) return InternalError(SslError("cannot write the CA key"));
  StatusOr<json> created = store->Create({{"apiVersion", "aicloud/v1"},
                                          {"kind", kKind},
                                          {"metadata", {{"name", kName}}},
                                          {"spec", {{"certificate", fresh->ca_pem()}, {"key", key_pem}}}});
  if (created.ok()) return fresh;
  if (created.status().code() != StatusCode::kAlreadyExists) return created.status();
  StatusOr<json> winner = store->Get({kKind, "", kName});  // another server created it first
  if (!winner.ok()) return winner.status();
  return from(*winner);
}

const std::string& ReplicaCa::ca_pem() const { return impl_->cert_pem; }

StatusOr<ReplicaCert> ReplicaCa::Issue(std::string_view address, std::string_view tenant, std::string_view job) const {
  const std::string host(address);
  std::string san;
  if (IsIp(host)) {
    san = "IP:" + host;
  } else if (IsDnsName(host)) {
    san = "DNS:" + host;
  } else {
    return InvalidArgumentError("replica CA: node address \"" + host + "\" is neither an IP address nor a DNS name");
  }
  StatusOr<Key> key = NewKey();
  if (!key.ok()) return key.status();
  const std::string cn = "replica " + std::string(tenant) + "/" + std::string(job);
  StatusOr<Cert> cert = NewCert(key->get(), cn.substr(0, 64), std::chrono::seconds(kLeafValidity).count(),
                                impl_->cert.get());
  if (!cert.ok()) return cert.status();
  X509* c = cert->get();
  X509* ca = impl_->cert.get();
  if (!AddExt(c, ca, NID_basic_constraints, "critical,CA:FALSE") ||
      !AddExt(c, ca, NID_key_usage, "critical,digitalSignature") ||
      !AddExt(c, ca, NID_ext_key_usage, "serverAuth") || !AddExt(c, ca, NID_subject_alt_name, san) ||
      !AddExt(c, ca, NID_authority_key_identifier, "keyid:always")) {
    return InternalError(SslError("cannot add a replica certificate's extensions"));
  }
  if (X509_sign(c, impl_->key.get(), EVP_sha256()) <= 0) return InternalError(SslError("cannot sign a replica certificate"));
  ReplicaCert out;
  out.cert_pem = CertPem(c);
  out.key_pem = KeyPem(key->get());
  if (out.cert_pem.empty() || out.key_pem.empty()) return InternalError(SslError("cannot write a replica certificate"));
  out.cert_pem += impl_->cert_pem;
  return out;
}

}  // namespace aicloud::control
