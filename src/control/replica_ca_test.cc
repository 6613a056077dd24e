// ReplicaCa: one CA per store whatever the number of servers, and leaves that verify against it
// for the node address they name and for no other.
#include "control/replica_ca.h"

#include <gtest/gtest.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <memory>

#include "store/memory_store.h"

namespace aicloud::control {
namespace {

struct Free {
  void operator()(X509* p) const { X509_free(p); }
  void operator()(X509_STORE* p) const { X509_STORE_free(p); }
  void operator()(X509_STORE_CTX* p) const { X509_STORE_CTX_free(p); }
  void operator()(BIO* p) const { BIO_free(p); }
};

std::unique_ptr<X509, Free> ReadCert(const std::string& pem) {
  std::unique_ptr<BIO, Free> b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  return std::unique_ptr<X509, Free>(PEM_read_bio_X509(b.get(), nullptr, nullptr, nullptr));
}

// Verifies the first certificate of leaf_pem against ca_pem, as a TLS client dialling `host`
// (an IP address, or a DNS name when dns) would. X509_V_OK when it passes.
int Verify(const std::string& leaf_pem, const std::string& ca_pem, const std::string& host, bool dns = false) {
  std::unique_ptr<X509, Free> leaf = ReadCert(leaf_pem), ca = ReadCert(ca_pem);
  if (!leaf || !ca) return -1;
  std::unique_ptr<X509_STORE, Free> store(X509_STORE_new());
  X509_STORE_add_cert(store.get(), ca.get());
  std::unique_ptr<X509_STORE_CTX, Free> ctx(X509_STORE_CTX_new());
  X509_STORE_CTX_init(ctx.get(), store.get(), leaf.get(), nullptr);
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx.get());
  X509_VERIFY_PARAM_set_purpose(param, X509_PURPOSE_SSL_SERVER);
  if (dns) {
    X509_VERIFY_PARAM_set1_host(param, host.c_str(), 0);
  } else {
    X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
  }
  if (X509_verify_cert(ctx.get()) == 1) return X509_V_OK;
  return X509_STORE_CTX_get_error(ctx.get());
}

TEST(ReplicaCaTest, CreatedOnceAndReadBackBySecondLoad) {
  store::MemoryStore store;
  StatusOr<ReplicaCa> first = ReplicaCa::Load(&store);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  StatusOr<ReplicaCa> second = ReplicaCa::Load(&store);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(first->ca_pem(), second->ca_pem());
  EXPECT_NE(first->ca_pem().find("BEGIN CERTIFICATE"), std::string::npos);
  // A leaf the second one issues verifies against the first one's CA: the key is shared too.
  StatusOr<ReplicaCert> leaf = second->Issue("10.1.2.3", "acme", "chat-1");
  ASSERT_TRUE(leaf.ok()) << leaf.status().ToString();
  EXPECT_EQ(Verify(leaf->cert_pem, first->ca_pem(), "10.1.2.3"), X509_V_OK);
  StatusOr<nlohmann::json> stored = store.Get({"ClusterKey", "", "replica-ca"});
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ((*stored)["spec"]["certificate"], first->ca_pem());
}

TEST(ReplicaCaTest, MalformedStoredCaIsAnError) {
  store::MemoryStore store;
  ASSERT_TRUE(store.Create({{"apiVersion", "aicloud/v1"},
                            {"kind", "ClusterKey"},
                            {"metadata", {{"name", "replica-ca"}}},
                            {"spec", {{"certificate", "junk"}, {"key", "junk"}}}})
                  .ok());
  StatusOr<ReplicaCa> ca = ReplicaCa::Load(&store);
  ASSERT_FALSE(ca.ok());
  EXPECT_EQ(ca.status().code(), StatusCode::kInternal);
  EXPECT_NE(ca.status().message().find("replica-ca"), std::string::npos) << ca.status().ToString();
}

TEST(ReplicaCaTest, LeafNamesTheNodeAddressAndNothingElse) {
  StatusOr<ReplicaCa> ca = ReplicaCa::Generate();
  ASSERT_TRUE(ca.ok()) << ca.status().ToString();
  StatusOr<ReplicaCert> leaf = ca->Issue("192.168.7.9", "acme", "chat-7f3a-2");
  ASSERT_TRUE(leaf.ok()) << leaf.status().ToString();
  EXPECT_NE(leaf->key_pem.find("BEGIN PRIVATE KEY"), std::string::npos);
  EXPECT_EQ(Verify(leaf->cert_pem, ca->ca_pem(), "192.168.7.9"), X509_V_OK);
  EXPECT_EQ(Verify(leaf->cert_pem, ca->ca_pem(), "192.168.7.10"), X509_V_ERR_IP_ADDRESS_MISMATCH);
  std::unique_ptr<X509, Free> cert = ReadCert(leaf->cert_pem);
  char cn[128] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_commonName, cn, sizeof(cn));
  EXPECT_STREQ(cn, "replica acme/chat-7f3a-2");
  EXPECT_EQ(X509_check_ca(cert.get()), 0);  // a leaf cannot sign others

  // Another CA's leaf for the same address does not verify.
  StatusOr<ReplicaCa> other = ReplicaCa::Generate();
  ASSERT_TRUE(other.ok());
  StatusOr<ReplicaCert> foreign = other->Issue("192.168.7.9", "acme", "chat-7f3a-2");
  ASSERT_TRUE(foreign.ok());
  EXPECT_NE(Verify(foreign->cert_pem, ca->ca_pem(), "192.168.7.9"), X509_V_OK);

  // DNS names go in as such; anything else is refused.
  StatusOr<ReplicaCert> dns = ca->Issue("gpu-7.cluster.local", "acme", "chat-1");
  ASSERT_TRUE(dns.ok()) << dns.status().ToString();
  EXPECT_EQ(Verify(dns->cert_pem, ca->ca_pem(), "gpu-7.cluster.local", /*dns=*/true), X509_V_OK);
  EXPECT_EQ(Verify(dns->cert_pem, ca->ca_pem(), "gpu-8.cluster.local", /*dns=*/true), X509_V_ERR_HOSTNAME_MISMATCH);
  StatusOr<ReplicaCert> bad = ca->Issue("10.0.0.1,DNS:evil", "acme", "chat-1");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace aicloud::control
