#include "models/reference/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace recap::models::reference {

// ---- ops ------------------------------------------------------------------------------------------

// The loops vectorize without changing what is summed in which order: every output adds its terms
// in ascending inner index, as the textbook dot product does. The forward runs over W's rows with
// all token rows at once (x transposed, which is small: the reference checks few tokens), so W is
// read once, in order; it used to be transposed first, a strided walk over the whole matrix that
// cost four times the arithmetic at 8 tokens. The backward's dx is axpys over W's rows.
Vec linear_forward(const Vec& x, int64_t rows, int64_t in, int64_t out, const Vec& W, const Vec* b) {
  Vec xt(static_cast<size_t>(in * rows));  // x transposed: row i holds x[., i]
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < in; ++i) xt[i * rows + r] = x[r * in + i];
  Vec y(static_cast<size_t>(rows * out), 0.0);
  Vec acc(static_cast<size_t>(rows));
  for (int64_t o = 0; o < out; ++o) {
    std::fill(acc.begin(), acc.end(), b ? (*b)[o] : 0.0);
    const double* wo = &W[o * in];
    for (int64_t i = 0; i < in; ++i) {
      const double w = wo[i];
      const double* xi = &xt[i * rows];
      for (int64_t r = 0; r < rows; ++r) acc[r] += xi[r] * w;
    }
    for (int64_t r = 0; r < rows; ++r) y[r * out + o] = acc[r];
  }
  return y;
}

Vec linear_backward(const Vec& x, const Vec& dy, int64_t rows, int64_t in, int64_t out, const Vec& W, Vec& dW, Vec* db) {
  Vec dx(static_cast<size_t>(rows * in), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double* dxr = &dx[r * in];
    for (int64_t o = 0; o < out; ++o) {
      const double a = dy[r * out + o];
      const double* wo = &W[o * in];
      for (int64_t i = 0; i < in; ++i) dxr[i] += a * wo[i];
    }
  }
  Vec acc(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const double a = dy[r * out + o];
      const double* xr = &x[r * in];
      for (int64_t i = 0; i < in; ++i) acc[i] += a * xr[i];
    }
    for (int64_t i = 0; i < in; ++i) dW[o * in + i] += acc[i];
  }
  if (db)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t r = 0; r < rows; ++r) (*db)[o] += dy[r * out + o];
  return dx;
}

namespace {
constexpr double kGeluC = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kGeluA = 0.044715;
}  // namespace

double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluC * (x + kGeluA * x * x * x))); }
double gelu_grad(double x) {
  double t = std::tanh(kGeluC * (x + kGeluA * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluC * (1.0 + 3.0 * kGeluA * x * x);
}

// ---- layers ---------------------------------------------------------------------------------------

class RefLayer {
 public:
  virtual ~RefLayer() = default;
  virtual Vec forward(const Vec& x, int64_t rows, const MaskFn& masks) = 0;
  virtual Vec backward(const Vec& dy) = 0;
};

struct Store {
  const Params& params;
  Params& grads;
  const Vec* param(const std::string& name, int64_t size) {
    auto it = params.find(name);
    if (it == params.end()) throw std::invalid_argument("reference: missing parameter " + name);
    if (static_cast<int64_t>(it->second.size()) != size)
      throw std::invalid_argument("reference: parameter " + name + " has " + std::to_string(it->second.size()) +
                                  " values, expected " + std::to_string(size));
    grads[name] = Vec(static_cast<size_t>(size), 0.0);
    return &it->second;
  }
  Vec* grad(const std::string& name) { return &grads.at(name); }
};

namespace {

std::string join(const std::string& path, const std::string& name) { return path.empty() ? name : path + "." + name; }

std::vector<uint8_t> get_mask(const MaskFn& masks, const std::string& layer, const std::string& op, uint64_t n, float p) {
  if (!masks) throw std::invalid_argument("reference: dropout at " + layer + " needs a mask function");
  std::vector<uint8_t> m = masks(layer, op, n, p);
  if (m.size() != n)
    throw std::invalid_argument("reference: mask for " + layer + "/" + op + " has " + std::to_string(m.size()) +
                                " elements, expected " + std::to_string(n));
  return m;
}

Vec add(const Vec& a, const Vec& b) {
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

class RefLinear : public RefLayer {
 public:
  RefLinear(Store& s, const std::string& path, int64_t in, int64_t out, bool bias) : in_(in), out_(out) {
    W_ = s.param(path + ".weight", out * in);
    dW_ = s.grad(path + ".weight");
    if (bias) {
      b_ = s.param(path + ".bias", out);
      db_ = s.grad(path + ".bias");
    }
  }
  Vec forward(const Vec& x, int64_t rows, const MaskFn&) override {
    x_ = x;
    rows_ = rows;
    return linear_forward(x, rows, in_, out_, *W_, b_);
  }
  Vec backward(const Vec& dy) override { return linear_backward(x_, dy, rows_, in_, out_, *W_, *dW_, db_); }

 private:
  int64_t in_, out_, rows_ = 0;
  const Vec* W_ = nullptr;
  const Vec* b_ = nullptr;
  Vec* dW_ = nullptr;
  Vec* db_ = nullptr;
  Vec x_;
};

class RefNorm : public RefLayer {
 public:
  RefNorm(Store& s, const std::string& path, int64_t width, bool rms) : width_(width), rms_(rms) {
    g_ = s.param(path + ".weight", width);
    dg_ = s.grad(path + ".weight");
    if (!rms) {
      b_ = s.param(path + ".bias", width);
      db_ = s.grad(path + ".bias");
    }
  }
  Vec forward(const Vec& x, int64_t rows, const MaskFn&) override {
    rows_ = rows;
    xhat_.assign(x.size(), 0.0);
    rstd_.assign(static_cast<size_t>(rows), 0.0);
    Vec y(x.size());
    const int64_t n = width_;
    for (int64_t r = 0; r < rows; ++r) {
      double mu = 0.0;
      if (!rms_) {
        for (int64_t c = 0; c < n; ++c) mu += x[r * n + c];
        mu /= static_cast<double>(n);
      }
      double var = 0.0;
      for (int64_t c = 0; c < n; ++c) var += (x[r * n + c] - mu) * (x[r * n + c] - mu);
      var /= static_cast<double>(n);
      const double rs = 1.0 / std::sqrt(var + kNormEps);
      rstd_[r] = rs;
      for (int64_t c = 0; c < n; ++c) {
        double xh = (x[r * n + c] - mu) * rs;
        xhat_[r * n + c] = xh;
        y[r * n + c] = xh * (*g_)[c] + (rms_ ? 0.0 : (*b_)[c]);
      }
    }
    return y;
  }
  Vec backward(const Vec& dy) override {
    const int64_t n = width_;
    Vec dx(dy.size());
    for (int64_t r = 0; r < rows_; ++r) {
      double sg = 0.0, sgx = 0.0;
      for (int64_t c = 0; c < n; ++c) {
        double g = dy[r * n + c] * (*g_)[c];
        sg += g;
        sgx += g * xhat_[r * n + c];
      }
      const double mg = rms_ ? 0.0 : sg / static_cast<double>(n), mgx = sgx / static_cast<double>(n);
      for (int64_t c = 0; c < n; ++c) {
        double g = dy[r * n + c] * (*g_)[c];
        dx[r * n + c] = rstd_[r] * (g - mg - xhat_[r * n + c] * mgx);
        (*dg_)[c] += dy[r * n + c] * xhat_[r * n + c];
        if (!rms_) (*db_)[c] += dy[r * n + c];
      }
    }
    return dx;
  }

 private:
  int64_t width_;
  bool rms_;
  int64_t rows_ = 0;
  const Vec* g_ = nullptr;
  const Vec* b_ = nullptr;
  Vec* dg_ = nullptr;
  Vec* db_ = nullptr;
  Vec xhat_, rstd_;
};

class RefGelu : public RefLayer {
 public:
  Vec forward(const Vec& x, int64_t, const MaskFn&) override {
    x_ = x;
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = gelu(x[i]);
    return y;
  }
  Vec backward(const Vec& dy) override {
    Vec dx(dy.size());
    for (size_t i = 0; i < dy.size(); ++i) dx[i] = gelu_grad(x_[i]) * dy[i];
    return dx;
  }

 private:
  Vec x_;
};

class RefDropout : public RefLayer {
 public:
  RefDropout(std::string path, float p, std::string op) : path_(std::move(path)), p_(p), op_(std::move(op)) {}
  Vec forward(const Vec& x, int64_t, const MaskFn& masks) override {
    if (p_ == 0.0f) return x;
    mask_ = get_mask(masks, path_, op_, x.size(), p_);
    const double scale = 1.0 / (1.0 - static_cast<double>(p_));
    Vec y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = mask_[i] ? x[i] * scale : 0.0;
    return y;
  }
  Vec backward(const Vec& dy) override {
    if (p_ == 0.0f) return dy;
    const double scale = 1.0 / (1.0 - static_cast<double>(p_));
    Vec dx(dy.size());
    for (size_t i = 0; i < dy.size(); ++i) dx[i] = mask_[i] ? dy[i] * scale : 0.0;
    return dx;
  }

 private:
  std::string path_;
  float p_;
  std::string op_;
  std::vector<uint8_t> mask_;
};

// qkv [T, 3H] -> [T, H]; causal softmax(scale q.k), dropout on P, times V.
class RefAttnCore : public RefLayer {
 public:
  RefAttnCore(std::string path, int64_t hidden, int64_t heads, float p)
      : path_(std::move(path)), H_(hidden), heads_(heads), dh_(hidden / heads), p_(p) {}

  Vec forward(const Vec& qkv, int64_t rows, const MaskFn& masks) override {
    T_ = rows;
    qkv_ = qkv;
    const int64_t T = T_;
    P_.assign(static_cast<size_t>(heads_ * T * T), 0.0);
    drop_.assign(P_.size(), 1.0);
    if (p_ > 0.0f) {
      std::vector<uint8_t> m = get_mask(masks, path_, "attn_dropout", P_.size(), p_);
      const double scale = 1.0 / (1.0 - static_cast<double>(p_));
      for (size_t i = 0; i < m.size(); ++i) drop_[i] = m[i] ? scale : 0.0;
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh_));
    Vec out(static_cast<size_t>(T * H_), 0.0);
    for (int64_t h = 0; h < heads_; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t base = (h * T + i) * T;
        double mx = -std::numeric_limits<double>::infinity();
        Vec s(static_cast<size_t>(i + 1));
        for (int64_t j = 0; j <= i; ++j) {
          double acc = 0.0;
          for (int64_t d = 0; d < dh_; ++d) acc += q(i, h, d) * k(j, h, d);
          s[j] = acc * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0.0;
        for (int64_t j = 0; j <= i; ++j) sum += std::exp(s[j] - mx);
        for (int64_t j = 0; j <= i; ++j) P_[base + j] = std::exp(s[j] - mx) / sum;
        for (int64_t d = 0; d < dh_; ++d) {
          double acc = 0.0;
          for (int64_t j = 0; j <= i; ++j) acc += P_[base + j] * drop_[base + j] * v(j, h, d);
          out[i * H_ + h * dh_ + d] = acc;
        }
      }
    return out;
  }

  Vec backward(const Vec& dout) override {
    const int64_t T = T_;
    const double scale = 1.0 / std::sqrt(static_cast<double>(dh_));
    Vec dqkv(qkv_.size(), 0.0);
    for (int64_t h = 0; h < heads_; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t base = (h * T + i) * T;
        Vec dP(static_cast<size_t>(i + 1));
        double dot = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          double acc = 0.0;
          for (int64_t d = 0; d < dh_; ++d) acc += dout[i * H_ + h * dh_ + d] * v(j, h, d);
          dP[j] = acc * drop_[base + j];
          dot += P_[base + j] * dP[j];
          // dv(j) += Pd(i, j) dout(i)
          for (int64_t d = 0; d < dh_; ++d)
            dqkv[j * 3 * H_ + 2 * H_ + h * dh_ + d] += P_[base + j] * drop_[base + j] * dout[i * H_ + h * dh_ + d];
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double dS = P_[base + j] * (dP[j] - dot) * scale;
          for (int64_t d = 0; d < dh_; ++d) {
            dqkv[i * 3 * H_ + h * dh_ + d] += dS * k(j, h, d);
            dqkv[j * 3 * H_ + H_ + h * dh_ + d] += dS * q(i, h, d);
          }
        }
      }
    return dqkv;
  }

 private:
  double q(int64_t i, int64_t h, int64_t d) const { return qkv_[i * 3 * H_ + h * dh_ + d]; }
  double k(int64_t j, int64_t h, int64_t d) const { return qkv_[j * 3 * H_ + H_ + h * dh_ + d]; }
  double v(int64_t j, int64_t h, int64_t d) const { return qkv_[j * 3 * H_ + 2 * H_ + h * dh_ + d]; }

  std::string path_;
  int64_t H_, heads_, dh_;
  float p_;
  int64_t T_ = 0;
  Vec qkv_, P_, drop_;
};

// Runs children in sequence (forward) and in reverse (backward).
class RefSeq : public RefLayer {
 public:
  void add(std::unique_ptr<RefLayer> l) { children_.push_back(std::move(l)); }
  Vec forward(const Vec& x, int64_t rows, const MaskFn& masks) override {
    Vec h = x;
    for (auto& c : children_) h = c->forward(h, rows, masks);
    return h;
  }
  Vec backward(const Vec& dy) override {
    Vec d = dy;
    for (size_t k = children_.size(); k-- > 0;) d = children_[k]->backward(d);
    return d;
  }

 private:
  std::vector<std::unique_ptr<RefLayer>> children_;
};

std::unique_ptr<RefLayer> make_attention(Store& s, const std::string& path, int64_t hidden, int64_t heads, float p) {
  auto seq = std::make_unique<RefSeq>();
  seq->add(std::make_unique<RefLinear>(s, join(path, "qkv"), hidden, 3 * hidden, true));
  seq->add(std::make_unique<RefAttnCore>(join(path, "core"), hidden, heads, p));
  seq->add(std::make_unique<RefLinear>(s, join(path, "proj"), hidden, hidden, true));
  return seq;
}

std::unique_ptr<RefLayer> make_mlp(Store& s, const std::string& path, int64_t hidden, int64_t ffn, float p) {
  auto seq = std::make_unique<RefSeq>();
  seq->add(std::make_unique<RefLinear>(s, join(path, "fc1"), hidden, ffn, true));
  seq->add(std::make_unique<RefGelu>());
  seq->add(std::make_unique<RefLinear>(s, join(path, "fc2"), ffn, hidden, true));
  seq->add(std::make_unique<RefDropout>(join(path, "dropout"), p, "dropout"));
  return seq;
}

class RefSwiGlu : public RefLayer {
 public:
  RefSwiGlu(Store& s, const std::string& path, int64_t hidden, int64_t ffn)
      : gate_(s, join(path, "gate"), hidden, ffn, false),
        up_(s, join(path, "up"), hidden, ffn, false),
        down_(s, join(path, "down"), ffn, hidden, false) {}
  Vec forward(const Vec& x, int64_t rows, const MaskFn& masks) override {
    g_ = gate_.forward(x, rows, masks);
    u_ = up_.forward(x, rows, masks);
    Vec h(g_.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = g_[i] / (1.0 + std::exp(-g_[i])) * u_[i];
    return down_.forward(h, rows, masks);
  }
  Vec backward(const Vec& dy) override {
    Vec dh = down_.backward(dy);
    Vec dg(dh.size()), du(dh.size());
    for (size_t i = 0; i < dh.size(); ++i) {
      double s = 1.0 / (1.0 + std::exp(-g_[i]));
      dg[i] = dh[i] * u_[i] * s * (1.0 + g_[i] * (1.0 - s));
      du[i] = dh[i] * g_[i] * s;
    }
    return add(gate_.backward(dg), up_.backward(du));
  }

 private:
  RefLinear gate_, up_, down_;
  Vec g_, u_;
};

class RefBlock : public RefLayer {
 public:
  RefBlock(Store& s, const std::string& path, int64_t hidden, int64_t heads, int64_t ffn, float p)
      : ln1_(s, join(path, "ln1"), hidden, false),
        attn_(make_attention(s, join(path, "attn"), hidden, heads, p)),
        drop1_(join(path, "drop1"), p, "dropout"),
        ln2_(s, join(path, "ln2"), hidden, false),
        mlp_(make_mlp(s, join(path, "mlp"), hidden, ffn, p)) {}
  Vec forward(const Vec& x, int64_t rows, const MaskFn& masks) override {
    Vec a = ln1_.forward(x, rows, masks);
    a = attn_->forward(a, rows, masks);
    a = drop1_.forward(a, rows, masks);
    Vec h = add(x, a);
    Vec m = ln2_.forward(h, rows, masks);
    m = mlp_->forward(m, rows, masks);
    return add(h, m);
  }
  Vec backward(const Vec& dy) override {
    Vec dm = mlp_->backward(dy);
    dm = ln2_.backward(dm);
    Vec dh = add(dy, dm);
    Vec da = drop1_.backward(dh);
    da = attn_->backward(da);
    da = ln1_.backward(da);
    return add(dh, da);
  }

 private:
  RefNorm ln1_;
  std::unique_ptr<RefLayer> attn_;
  RefDropout drop1_;
  RefNorm ln2_;
  std::unique_ptr<RefLayer> mlp_;
};

}  // namespace

// ---- the registry's factories ---------------------------------------------------------------------

std::unique_ptr<RefLayer> make_linear(Store& s, const LayerArgs& a) {
  return std::make_unique<RefLinear>(s, a.name, a.hidden, a.hidden, true);
}
std::unique_ptr<RefLayer> make_gelu(Store&, const LayerArgs&) { return std::make_unique<RefGelu>(); }
std::unique_ptr<RefLayer> make_dropout(Store&, const LayerArgs& a) {
  return std::make_unique<RefDropout>(a.name, a.dropout, "dropout");
}
std::unique_ptr<RefLayer> make_layernorm(Store& s, const LayerArgs& a) {
  return std::make_unique<RefNorm>(s, a.name, a.hidden, false);
}
std::unique_ptr<RefLayer> make_rmsnorm(Store& s, const LayerArgs& a) {
  return std::make_unique<RefNorm>(s, a.name, a.hidden, true);
}
std::unique_ptr<RefLayer> make_swiglu(Store& s, const LayerArgs& a) {
  return std::make_unique<RefSwiGlu>(s, a.name, a.hidden, a.ffn);
}
std::unique_ptr<RefLayer> make_mlp_layer(Store& s, const LayerArgs& a) {
  return make_mlp(s, a.name, a.hidden, a.ffn, a.dropout);
}
std::unique_ptr<RefLayer> make_attention_layer(Store& s, const LayerArgs& a) {
  return make_attention(s, a.name, a.hidden, a.heads, a.dropout);
}
std::unique_ptr<RefLayer> make_block(Store& s, const LayerArgs& a) {
  return std::make_unique<RefBlock>(s, a.name, a.hidden, a.heads, a.ffn, a.dropout);
}

// ---- model ------------------------------------------------------------------------------------------

RefModel::RefModel(const ModelSpec& spec, const Params& params) : spec_(spec), params_(params) {
  std::string problem = validate(spec);
  if (!problem.empty()) throw std::invalid_argument("reference: invalid model spec: " + problem);
  Store s{params_, grads_};
  for (size_t i = 0; i < spec.layers.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    const std::string name = l.kind + std::to_string(i);
    const LayerKind* kind = find_layer_kind(l.kind);
    if (!kind) throw std::invalid_argument("reference: unknown kind " + l.kind);
    std::unique_ptr<RefLayer> layer = kind->make_reference(s, layer_args(spec, l, name));
    layers_.push_back(std::move(layer));
  }
  if (grads_.size() != params_.size())
    throw std::invalid_argument("reference: " + std::to_string(params_.size()) + " parameters given, the spec has " +
                                std::to_string(grads_.size()));
}

RefModel::~RefModel() = default;

Vec RefModel::forward(const Vec& x, int64_t rows, const MaskFn& masks) {
  if (static_cast<int64_t>(x.size()) != rows * spec_.hidden) throw std::invalid_argument("reference: input size mismatch");
  rows_ = rows;
  Vec h = x;
  for (auto& l : layers_) h = l->forward(h, rows, masks);
  return h;
}

Vec RefModel::backward(const Vec& dy) {
  if (static_cast<int64_t>(dy.size()) != rows_ * spec_.hidden) throw std::invalid_argument("reference: gradient size mismatch");
  Vec d = dy;
  for (size_t k = layers_.size(); k-- > 0;) d = layers_[k]->backward(d);
  return d;
}

}  // namespace recap::models::reference
