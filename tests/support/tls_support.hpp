// Helpers for the TLS tests (net, examples): a throwaway PKI made with OpenSSL's API at test
// time (a CA and leaf certificates signed by it, PEM text, optionally written to a temp
// directory), and a child process with its stdin and its output (stdout and stderr together)
// on pipes, for driving `openssl s_server` / `openssl s_client`.
#pragma once

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

extern char** environ;

namespace spindle::testing {

// A key and its certificate, as PEM text.
struct tls_identity {
  std::string certificate_pem;
  std::string key_pem;
};

namespace tls_detail {

inline std::string pem_of(int (*write)(BIO*, void*), void* object) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), &BIO_free);
  if (write(bio.get(), object) != 1) throw std::runtime_error("PEM write failed");
  char* data = nullptr;
  const long length = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, std::size_t(length));
}

inline void add_extension(X509* certificate, X509* issuer, int nid, const char* value) {
  X509V3_CTX context;
  X509V3_set_ctx(&context, issuer, certificate, nullptr, nullptr, 0);
  X509_EXTENSION* extension = X509V3_EXT_conf_nid(nullptr, &context, nid, value);
  if (extension == nullptr) throw std::runtime_error("X509V3_EXT_conf_nid failed");
  X509_add_ext(certificate, extension, -1);
  X509_EXTENSION_free(extension);
}

}  // namespace tls_detail

// A certificate authority that signs leaf certificates (P-256 keys, SHA-256, valid a day).
class test_certificate_authority {
 public:
  explicit test_certificate_authority(const std::string& name = "spindle test CA")
      : key_(EVP_EC_gen("P-256"), &EVP_PKEY_free), certificate_(X509_new(), &X509_free) {
    X509* c = certificate_.get();
    fill(c, key_.get(), name, 1);
    X509_set_issuer_name(c, X509_get_subject_name(c));
    tls_detail::add_extension(c, c, NID_basic_constraints, "critical,CA:TRUE");
    tls_detail::add_extension(c, c, NID_key_usage, "critical,keyCertSign,cRLSign");
    tls_detail::add_extension(c, c, NID_subject_key_identifier, "hash");
    if (X509_sign(c, key_.get(), EVP_sha256()) == 0) throw std::runtime_error("CA sign failed");
  }

  std::string certificate_pem() const {
    return tls_detail::pem_of([](BIO* b, void* x) { return PEM_write_bio_X509(b, static_cast<X509*>(x)); },
                              certificate_.get());
  }

  // A leaf for these subject alternative names ("DNS:localhost,IP:127.0.0.1").
  tls_identity issue(const std::string& common_name, const std::string& alternative_names) {
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_EC_gen("P-256"), &EVP_PKEY_free);
    std::unique_ptr<X509, decltype(&X509_free)> leaf(X509_new(), &X509_free);
    X509* c = leaf.get();
    fill(c, key.get(), common_name, ++serial_);
    X509_set_issuer_name(c, X509_get_subject_name(certificate_.get()));
    tls_detail::add_extension(c, certificate_.get(), NID_basic_constraints, "critical,CA:FALSE");
    tls_detail::add_extension(c, certificate_.get(), NID_subject_alt_name, alternative_names.c_str());
    tls_detail::add_extension(c, certificate_.get(), NID_ext_key_usage, "serverAuth,clientAuth");
    tls_detail::add_extension(c, certificate_.get(), NID_authority_key_identifier, "keyid:always");
    if (X509_sign(c, key_.get(), EVP_sha256()) == 0) throw std::runtime_error("leaf sign failed");
    tls_identity identity;
    identity.certificate_pem = tls_detail::pem_of(
        [](BIO* b, void* x) { return PEM_write_bio_X509(b, static_cast<X509*>(x)); }, c);
    identity.key_pem = tls_detail::pem_of(
        [](BIO* b, void* k) {
          return PEM_write_bio_PrivateKey(b, static_cast<EVP_PKEY*>(k), nullptr, nullptr, 0, nullptr, nullptr);
        },
        key.get());
    return identity;
  }

 private:
  static void fill(X509* c, EVP_PKEY* key, const std::string& common_name, long serial) {
    X509_set_version(c, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(c), serial);
    X509_gmtime_adj(X509_getm_notBefore(c), -3600);
    X509_gmtime_adj(X509_getm_notAfter(c), 24 * 3600);
    X509_set_pubkey(c, key);
    X509_NAME_add_entry_by_txt(X509_get_subject_name(c), "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1, 0);
  }

  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key_;
  std::unique_ptr<X509, decltype(&X509_free)> certificate_;
  long serial_ = 1;
};

// A temporary directory, removed with everything in it.
class temporary_directory {
 public:
  temporary_directory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "spindle-tls-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~temporary_directory() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  temporary_directory(const temporary_directory&) = delete;
  temporary_directory& operator=(const temporary_directory&) = delete;
  const std::filesystem::path& path() const noexcept { return path_; }
  std::filesystem::path write(const std::string& name, std::string_view text) const {
    const std::filesystem::path file = path_ / name;
    std::ofstream(file, std::ios::binary) << text;
    return file;
  }

 private:
  std::filesystem::path path_;
};

// A child process: its stdin is a pipe, its stdout and stderr one pipe (the output).
class child_process {
 public:
  explicit child_process(std::vector<std::string> arguments) {
    int input[2], output[2];
    if (::pipe2(input, O_CLOEXEC) != 0 || ::pipe2(output, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, input[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, output[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, output[1], STDERR_FILENO);
    std::vector<char*> argv;
    for (auto& argument : arguments) argv.push_back(argument.data());
    argv.push_back(nullptr);
    const int spawned = ::posix_spawnp(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(input[0]);
    ::close(output[1]);
    input_ = input[1];
    output_ = output[0];
    if (spawned != 0) {
      pid_ = -1;
      throw std::runtime_error("posix_spawnp " + arguments[0] + " failed");
    }
  }
  ~child_process() {
    close_input();
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (output_ >= 0) ::close(output_);
  }
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  void write_input(std::string_view text) {
    while (!text.empty()) {
      const ssize_t n = ::write(input_, text.data(), text.size());
      if (n <= 0) throw std::runtime_error("write to the child failed");
      text.remove_prefix(std::size_t(n));
    }
  }
  void close_input() {
    if (input_ >= 0) ::close(input_);
    input_ = -1;
  }

  // Reads output until it contains `marker` (true) or the output ends / `patience` passes.
  bool read_until(std::string_view marker, std::chrono::milliseconds patience = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (output_text_.find(marker) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{output_, POLLIN, 0};
      if (::poll(&p, 1, int(left.count())) != 1) return false;
      char chunk[4096];
      const ssize_t n = ::read(output_, chunk, sizeof chunk);
      if (n <= 0) return false;
      output_text_.append(chunk, std::size_t(n));
    }
    return true;
  }
  // Everything until the output ends; then waits for the exit status.
  int finish(std::chrono::milliseconds patience = std::chrono::seconds(30)) {
    read_until(std::string_view("\x01\x02 never printed"), patience);
    int status = 0;
    if (::waitpid(pid_, &status, 0) == pid_) pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  const std::string& output() const noexcept { return output_text_; }

 private:
  pid_t pid_ = -1;
  int input_ = -1;
  int output_ = -1;
  std::string output_text_;
};

}  // namespace spindle::testing
