#include "spindle/diagnostics/json_writer.hpp"
#include "spindle/diagnostics/registry.hpp"

#include <gtest/gtest.h>

#include <limits>
#include <string>

namespace spindle::diagnostics {
namespace {

TEST(JsonWriter, PlacesCommasAndColons) {
  std::string out;
  json_writer w(out);
  w.begin_object().member("a", 1).key("b").begin_array().value(true).null().value("x").end_array()
      .key("c").begin_object().end_object().end_object();
  EXPECT_EQ(out, R"({"a":1,"b":[true,null,"x"],"c":{}})");
}

TEST(JsonWriter, EscapesControlCharactersAndReplacesInvalidUtf8) {
  std::string out;
  json_writer w(out);
  w.value(std::string_view("q\"\\\n\x01\x7f \xc3\xa9 \xff\xc3", 12));
  EXPECT_EQ(out, "\"q\\\"\\\\\\n\\u0001\\u007f \xc3\xa9 ??\"");
}

TEST(JsonWriter, WritesNonFiniteNumbersAsNull) {
  std::string out;
  json_writer w(out);
  w.begin_array().value(std::numeric_limits<double>::quiet_NaN()).value(0.5).value(-7).end_array();
  EXPECT_EQ(out, "[null,0.5,-7]");
}

TEST(DiagnosticsRegistry, GathersSectionsSharingANameAndForgetsDroppedOnes) {
  registry r;
  auto a = r.add_snapshot_section("actors", [](json_writer& w) { w.value(1); });
  auto b = r.add_snapshot_section("fork", [](json_writer& w) { w.value(2); });
  auto c = r.add_snapshot_section("actors", [](json_writer& w) { w.value(3); });
  auto m = r.add_metrics([](std::string& out) { out += "x 1\n"; });
  std::string out;
  json_writer w(out);
  r.write_snapshot_sections(w);
  EXPECT_EQ(out, R"({"actors":[1,3],"fork":2})");
  c.reset();
  out.clear();
  json_writer w2(out);
  r.write_snapshot_sections(w2);
  EXPECT_EQ(out, R"({"actors":1,"fork":2})");
  std::string text;
  r.write_metrics(text);
  EXPECT_EQ(text, "x 1\n");
  m = {};
  text.clear();
  r.write_metrics(text);
  EXPECT_EQ(text, "");
}

}  // namespace
}  // namespace spindle::diagnostics
