// A C++ client with RAII ownership of libnrt handles: the runtime, models, tensors, tensor
// sets, and a profiling session. Linked with -Wl,--no-undefined by capi/tests/c_api.rs.
// usage: raii MODEL_1NC.neff INPUT.bin TRACE.json
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nrt/nrt.h>
#include <nrt/nrt_experimental.h>
#include <nrt/nrt_profile.h>
#include <nrt/nrt_status.h>

namespace {

int failures = 0;

void check(bool ok, const std::string &what) {
    std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
    if (!ok) ++failures;
}

struct NrtError : std::runtime_error {
    NRT_STATUS status;
    NrtError(const std::string &what, NRT_STATUS s)
        : std::runtime_error(what + ": " + nrt_get_status_as_str(s)), status(s) {}
};

void ok_or_throw(NRT_STATUS s, const char *what) {
    if (s != NRT_SUCCESS) throw NrtError(what, s);
}

std::vector<char> slurp(const char *path) {
    std::ifstream f(path, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

class Runtime {
  public:
    Runtime() { ok_or_throw(nrt_init(NRT_FRAMEWORK_TYPE_NO_FW, "", ""), "nrt_init"); }
    ~Runtime() { nrt_close(); }
    Runtime(const Runtime &) = delete;
    Runtime &operator=(const Runtime &) = delete;
};

class Tensor {
  public:
    Tensor(nrt_tensor_placement_t p, int vnc, size_t size, const std::string &name) {
        ok_or_throw(nrt_tensor_allocate(p, vnc, size, name.c_str(), &t_), "nrt_tensor_allocate");
    }
    ~Tensor() { nrt_tensor_free(&t_); }
    Tensor(Tensor &&o) noexcept : t_(o.t_) { o.t_ = nullptr; }
    Tensor(const Tensor &) = delete;
    Tensor &operator=(const Tensor &) = delete;
    nrt_tensor_t *get() const { return t_; }
    void write(const void *buf, size_t size) { ok_or_throw(nrt_tensor_write(t_, buf, 0, size), "nrt_tensor_write"); }
    std::vector<char> read() const {
        std::vector<char> v(nrt_tensor_get_size(t_));
        ok_or_throw(nrt_tensor_read(t_, v.data(), 0, v.size()), "nrt_tensor_read");
        return v;
    }

  private:
    nrt_tensor_t *t_ = nullptr;
};

class TensorSet {
  public:
    TensorSet() { ok_or_throw(nrt_allocate_tensor_set(&s_), "nrt_allocate_tensor_set"); }
    ~TensorSet() { nrt_destroy_tensor_set(&s_); }
    TensorSet(const TensorSet &) = delete;
    TensorSet &operator=(const TensorSet &) = delete;
    void add(const std::string &name, const Tensor &t) {
        ok_or_throw(nrt_add_tensor_to_tensor_set(s_, name.c_str(), t.get()), "nrt_add_tensor_to_tensor_set");
    }
    nrt_tensor_set_t *get() const { return s_; }

  private:
    nrt_tensor_set_t *s_ = nullptr;
};

struct InfoDeleter {
    void operator()(nrt_tensor_info_array_t *p) const { nrt_free_model_tensor_info(p); }
};

class Model {
  public:
    explicit Model(const std::vector<char> &neff) {
        ok_or_throw(nrt_load(neff.data(), neff.size(), -1, -1, &m_), "nrt_load");
    }
    ~Model() {
        if (m_) nrt_unload(m_);
    }
    Model(const Model &) = delete;
    Model &operator=(const Model &) = delete;
    nrt_model_t *get() const { return m_; }
    std::unique_ptr<nrt_tensor_info_array_t, InfoDeleter> info() const {
        nrt_tensor_info_array_t *p = nullptr;
        ok_or_throw(nrt_get_model_tensor_info(m_, &p), "nrt_get_model_tensor_info");
        return std::unique_ptr<nrt_tensor_info_array_t, InfoDeleter>(p);
    }
    void execute(const TensorSet &in, TensorSet &out) { ok_or_throw(nrt_execute(m_, in.get(), out.get()), "nrt_execute"); }

  private:
    nrt_model_t *m_ = nullptr;
};

// Profiles a model for the lifetime of the object; the trace is written on destruction.
class ProfileSession {
  public:
    ProfileSession(const Model &m, std::string path) : path_(std::move(path)) {
        ok_or_throw(nrt_profile_start(m.get(), path_.c_str()), "nrt_profile_start");
    }
    ~ProfileSession() { nrt_profile_stop(path_.c_str()); }
    ProfileSession(const ProfileSession &) = delete;
    ProfileSession &operator=(const ProfileSession &) = delete;

  private:
    std::string path_;
};

}  // namespace

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    try {
        Runtime rt;
        std::vector<char> input = slurp(argv[2]);
        Model model(slurp(argv[1]));
        auto info = model.info();
        TensorSet ins, outs;
        std::vector<Tensor> tensors;
        std::vector<size_t> outputs;
        for (uint64_t i = 0; i < info->tensor_count; ++i) {
            const nrt_tensor_info_t &ti = info->tensor_array[i];
            tensors.emplace_back(NRT_TENSOR_PLACEMENT_DEVICE, 0, ti.size, ti.name);
            if (ti.usage == NRT_TENSOR_USAGE_INPUT) {
                tensors.back().write(input.data(), std::min(ti.size, input.size()));
                ins.add(ti.name, tensors.back());
            } else {
                outs.add(ti.name, tensors.back());
                outputs.push_back(tensors.size() - 1);
            }
        }
        {
            ProfileSession prof(model, argv[3]);
            model.execute(ins, outs);
            model.execute(ins, outs);
        }
        for (size_t k : outputs) {
            std::vector<char> out = tensors[k].read();
            size_t n = std::min(out.size(), input.size());
            check(n > 0 && std::memcmp(out.data(), input.data(), n) == 0, "output == input through RAII wrappers");
        }
        std::vector<char> trace = slurp(argv[3]);
        std::string t(trace.begin(), trace.end());
        check(t.find("\"cat\":\"device_exec\"") != std::string::npos, "the profile session wrote device spans");
        try {
            Tensor bad(NRT_TENSOR_PLACEMENT_DEVICE, -1, 16, "bad");
            check(false, "allocating a device tensor on vnc -1 throws");
        } catch (const NrtError &e) {
            check(e.status == NRT_INVALID, std::string("allocating a device tensor on vnc -1 throws: ") + e.what());
        }
    } catch (const std::exception &e) {
        check(false, std::string("unexpected exception: ") + e.what());
    }
    // Everything was released before nrt_close ran (Runtime is destroyed last).
    if (failures == 0) {
        std::printf("ALL OK\n");
        return 0;
    }
    return 1;
}
