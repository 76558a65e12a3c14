// The study's reports: JSON parses and holds every result (null where not applicable), CSV rows
// have the header's field count, the SVG has one cell per tensor x config, names are escaped.
#include "study/study_report.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace blockscale::study {
namespace {

// A small study with a tensor whose name needs escaping, an exact tensor and a NaN.
StudyResult small_study() {
  std::vector<float> v(64 * 64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * i) * (i % 64 == 5 ? 50.0f : 1.0f);
  std::vector<float> exact(2 * 64, 0.5f);
  exact[7] = NAN;
  const std::string odd = "we\"ird,<name>\\";
  std::vector<StudyInput> in;
  auto add = [&](const std::string& name, std::vector<float> values, int64_t rows, int64_t cols) {
    in.push_back({name, {rows, cols}, "F32", [=](TensorSource* s) {
                    *s = memory_source(name, {rows, cols}, rows, cols, values);
                    return Status::ok();
                  }});
  };
  add(odd, v, 64, 64);
  add("exact", exact, 2, 64);
  add("b", std::vector<float>(v.begin(), v.begin() + 32 * 64), 32, 64);
  StudyOptions o;
  o.configs = study_configs(formats::all_formats(), formats::ScaleRounding::kBoth);
  o.gemms = {{odd, "b"}};
  StudyResult r;
  const Status s = run_study(in, o, &r);
  EXPECT_TRUE(s) << s.message();
  r.skipped.push_back({"ids", "dtype I32 is not a floating-point dtype"});
  return r;
}

// Splits one CSV line (RFC 4180 quoting).
std::vector<std::string> csv_split(const std::string& line) {
  std::vector<std::string> f(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted && c == '"' && i + 1 < line.size() && line[i + 1] == '"') f.back() += '"', ++i;
    else if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) f.emplace_back();
    else f.back() += c;
  }
  return f;
}

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(StudyReport, JsonHoldsEveryResult) {
  const StudyResult r = small_study();
  StudyProvenance p;
  p.inputs = {"a \"b\".safetensors"};
  const nlohmann::json j = nlohmann::json::parse(format_json(r, p));
  EXPECT_EQ(j["blockscale_study"], 1);
  EXPECT_EQ(j["inputs"][0], "a \"b\".safetensors");
  ASSERT_EQ(j["configs"].size(), 13u);
  ASSERT_EQ(j["tensors"].size(), 3u);
  EXPECT_EQ(j["tensors"][0]["name"], "we\"ird,<name>\\");
  for (const auto& t : j["tensors"]) {
    ASSERT_EQ(t["results"].size(), 13u);
    for (const auto& e : t["results"]) {
      const bool fp8_block = e["config"].get<std::string>().rfind("fp8_block", 0) == 0;
      EXPECT_EQ(e["scale_at_min"].is_null(), fp8_block) << e;
      EXPECT_EQ(e["blocks"].is_null(), fp8_block) << e;
      // null only where every element was excluded (the NaN's 128x128 tile covers "exact")
      EXPECT_EQ(e["rel_fro_error"].is_null(), e["excluded"] == e["elements"]) << e;
    }
  }
  const auto& exact = j["tensors"][1]["results"][0];  // mxfp8 of 0.5s: exact, NaN excluded
  EXPECT_TRUE(exact["sqnr_db"].is_null());
  EXPECT_EQ(exact["rel_fro_error"], 0);
  EXPECT_EQ(exact["nonfinite"], 1);
  EXPECT_EQ(exact["excluded"], 32);
  ASSERT_EQ(j["gemms"].size(), 1u);
  EXPECT_EQ(j["gemms"][0]["m"], 64);
  EXPECT_EQ(j["gemms"][0]["n"], 32);
  EXPECT_EQ(j["gemms"][0]["results"].size(), 13u);
  EXPECT_EQ(j["skipped"][0]["name"], "ids");
  StudyProvenance suite;
  suite.hidden = 256;
  suite.seed = 9;
  EXPECT_EQ(nlohmann::json::parse(format_json(r, suite))["suite"]["seed"], 9);
}

TEST(StudyReport, CsvRowsMatchTheHeader) {
  const StudyResult r = small_study();
  const std::vector<std::string> csv = lines(format_csv(r));
  ASSERT_EQ(csv.size(), 1u + 3 * 13);
  const size_t fields = csv_split(csv[0]).size();
  EXPECT_EQ(fields, 16u);
  for (const std::string& l : csv) EXPECT_EQ(csv_split(l).size(), fields) << l;
  EXPECT_EQ(csv_split(csv[1])[0], "we\"ird,<name>\\");
  EXPECT_EQ(csv_split(csv[14])[4], "inf");  // the exact tensor's SQNR
  const std::vector<std::string> last = csv_split(csv.back());  // fp8_block128x128: no limits
  EXPECT_EQ(last[3], "fp8_block128x128");
  EXPECT_EQ(last[10], "");
  const std::vector<std::string> gemm = lines(format_gemm_csv(r));
  ASSERT_EQ(gemm.size(), 1u + 13);
  for (const std::string& l : gemm) EXPECT_EQ(csv_split(l).size(), 10u) << l;
}

TEST(StudyReport, SvgHasACellPerResult) {
  const StudyResult r = small_study();
  const std::string svg = format_svg(r, StudyProvenance{});
  size_t cells = 0;
  for (size_t at = svg.find("class=\"cell\""); at != std::string::npos; at = svg.find("class=\"cell\"", at + 1)) ++cells;
  EXPECT_EQ(cells, (3 + 1) * 13u);  // 3 tensors and 1 GEMM pair, 13 configs
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>\n"), std::string::npos);
  EXPECT_NE(svg.find("we&quot;ird,&lt;name&gt;\\"), std::string::npos);  // escaped
  EXPECT_EQ(svg.find("<name>"), std::string::npos);
  EXPECT_NE(svg.find(">exact<"), std::string::npos);
}

TEST(StudyReport, TableListsEveryRowAndNotes) {
  const StudyResult r = small_study();
  const std::string t = format_table(r);
  EXPECT_EQ(lines(t).size(), 2 + 1 + 3 * 13 + 1 + 1 + 13 + 1 + 2u);  // title, tensors, gemm, notes
  EXPECT_EQ(t.rfind("blockscale study: 3 tensors x 13 recipes", 0), 0u) << t;
  EXPECT_NE(t.find("note: exact holds 1 NaN/Inf values"), std::string::npos) << t;
  EXPECT_NE(t.find("skipped ids: dtype I32"), std::string::npos);
}

TEST(StudyReport, WritesEveryFileAtomically) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("study_report_" + std::to_string(::getpid())) / "new";
  std::vector<std::string> written;
  const Status s = write_reports(small_study(), StudyProvenance{}, dir.string(), &written);
  ASSERT_TRUE(s) << s.message();
  EXPECT_EQ(written.size(), 4u);
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().filename().string()[0] == '.', false) << "temporary left: " << e.path();
  }
  EXPECT_EQ(files, 4u);
  std::ifstream json(dir / "study.json");
  EXPECT_NO_THROW(nlohmann::json::parse(json));
  // A file where the directory should be: an error naming --out-dir's value.
  const std::string blocked = (dir / "study.csv").string();
  const Status bad = write_reports(small_study(), StudyProvenance{}, blocked, &written);
  EXPECT_NE(bad.message().find("out-dir '" + blocked + "'"), std::string::npos) << bad.message();
  std::filesystem::remove_all(dir.parent_path());
}

}  // namespace
}  // namespace blockscale::study
