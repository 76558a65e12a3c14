// codec_dump: runs formats/scalar_codecs.h over a file of values, for oracles outside C++
// (tests/formats/ml_dtypes_oracle_test.py). Not a test by itself.
//
//   codec_dump encode FORMAT IN.f32 OUT.u8   little-endian float32 in, one code byte per value out
//   codec_dump decode FORMAT OUT.f32         every code of FORMAT, decoded, as little-endian float32
//
// FORMAT: e4m3 e5m2 e2m1 e2m3 e3m2 ue4m3 e8m0_ceil e8m0_floor (e8m0 decodes either way).
#include "formats/scalar_codecs.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

namespace {

namespace bf = blockscale::formats;

struct Codec {
  const char* name;
  uint8_t (*encode)(float);
  float (*decode)(uint32_t);
  uint32_t n_codes;
};

const Codec kCodecs[] = {
    {"e4m3", bf::encode_e4m3, bf::decode_e4m3, 256},
    {"e5m2", bf::encode_e5m2, bf::decode_e5m2, 256},
    {"e2m1", bf::encode_e2m1, bf::decode_e2m1, 16},
    {"e2m3", bf::encode_e2m3, bf::decode_e2m3, 64},
    {"e3m2", bf::encode_e3m2, bf::decode_e3m2, 64},
    {"ue4m3", bf::encode_ue4m3, bf::decode_ue4m3, 128},
    {"e8m0_ceil", [](float x) { return bf::encode_e8m0(x, true); }, bf::decode_e8m0, 256},
    {"e8m0_floor", [](float x) { return bf::encode_e8m0(x, false); }, bf::decode_e8m0, 256},
};

int usage() {
  std::fprintf(stderr,
               "usage: codec_dump encode FORMAT IN.f32 OUT.u8\n"
               "       codec_dump decode FORMAT OUT.f32\n"
               "FORMAT: e4m3 e5m2 e2m1 e2m3 e3m2 ue4m3 e8m0_ceil e8m0_floor\n");
  return 2;
}

bool write_file(const char* path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return usage();
  const Codec* codec = nullptr;
  for (const Codec& c : kCodecs) {
    if (std::strcmp(argv[2], c.name) == 0) codec = &c;
  }
  if (!codec) {
    std::fprintf(stderr, "codec_dump: unknown format '%s'\n", argv[2]);
    return usage();
  }

  if (std::strcmp(argv[1], "encode") == 0 && argc == 5) {
    std::ifstream in(argv[3], std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "codec_dump: cannot read %s\n", argv[3]);
      return 1;
    }
    const std::vector<unsigned char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (raw.size() % 4 != 0) {
      std::fprintf(stderr, "codec_dump: %s: size %zu is not a multiple of 4\n", argv[3], raw.size());
      return 1;
    }
    std::vector<unsigned char> codes(raw.size() / 4);
    for (size_t i = 0; i < codes.size(); ++i) {
      const unsigned char* b = &raw[4 * i];
      const uint32_t u = b[0] | (b[1] << 8) | (b[2] << 16) | (uint32_t{b[3]} << 24);
      codes[i] = codec->encode(bf::bits_float(u));
    }
    if (!write_file(argv[4], codes)) {
      std::fprintf(stderr, "codec_dump: cannot write %s\n", argv[4]);
      return 1;
    }
    return 0;
  }

  if (std::strcmp(argv[1], "decode") == 0 && argc == 4) {
    std::vector<unsigned char> out;
    for (uint32_t c = 0; c < codec->n_codes; ++c) {
      const uint32_t u = bf::float_bits(codec->decode(c));
      for (int k = 0; k < 4; ++k) out.push_back(static_cast<unsigned char>(u >> (8 * k)));
    }
    if (!write_file(argv[3], out)) {
      std::fprintf(stderr, "codec_dump: cannot write %s\n", argv[3]);
      return 1;
    }
    return 0;
  }
  return usage();
}
