#include "store/label_selector.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace aicloud::store {
namespace {

using ::testing::HasSubstr;

const std::map<std::string, std::string> kLabels = {
    {"team", "nlp"}, {"tier", "prod"}, {"gpu", ""}, {"aicloud.io/pool", "a100"}};

struct MatchCase {
  const char* selector;
  bool matches;
};

class SelectorMatchTest : public ::testing::TestWithParam<MatchCase> {};

TEST_P(SelectorMatchTest, MatchesAsKubernetesDoes) {
  StatusOr<LabelSelector> sel = LabelSelector::Parse(GetParam().selector);
  ASSERT_TRUE(sel.ok()) << sel.status().ToString();
  EXPECT_EQ(sel->Matches(kLabels), GetParam().matches) << GetParam().selector;
  // The JSON form of the same labels gives the same answer.
  EXPECT_EQ(sel->Matches(nlohmann::json(kLabels)), GetParam().matches);
  // The canonical text parses back to a selector with the same meaning.
  StatusOr<LabelSelector> again = LabelSelector::Parse(sel->ToString());
  ASSERT_TRUE(again.ok()) << sel->ToString();
  EXPECT_EQ(again->ToString(), sel->ToString());
  EXPECT_EQ(again->Matches(kLabels), GetParam().matches);
}

INSTANTIATE_TEST_SUITE_P(
    Table, SelectorMatchTest,
    ::testing::Values(
        MatchCase{"", true}, MatchCase{"   ", true}, MatchCase{"team=nlp", true},
        MatchCase{"team==nlp", true}, MatchCase{"team=cv", false}, MatchCase{"team!=cv", true},
        MatchCase{"team!=nlp", false}, MatchCase{"owner!=bob", true}, MatchCase{"team", true},
        MatchCase{"owner", false}, MatchCase{"!owner", true}, MatchCase{"!team", false},
        MatchCase{"gpu", true}, MatchCase{"gpu=", true}, MatchCase{"team=nlp,tier=prod", true},
        MatchCase{"team=nlp,tier=dev", false}, MatchCase{" team = nlp , !owner ", true},
        MatchCase{"aicloud.io/pool=a100", true}, MatchCase{"aicloud.io/pool!=a100", false},
        MatchCase{"tier in (prod,staging)", true}, MatchCase{"tier in (dev)", false},
        MatchCase{"owner in (bob)", false}, MatchCase{"tier notin (dev, staging)", true},
        MatchCase{"tier notin (prod)", false}, MatchCase{"owner notin (bob)", true},
        MatchCase{"team=nlp,tier in(prod),!spot", true}));

struct BadCase {
  const char* selector;
  const char* problem;  // a substring of the message
};

class SelectorErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(SelectorErrorTest, NamesTheProblem) {
  StatusOr<LabelSelector> sel = LabelSelector::Parse(GetParam().selector);
  ASSERT_FALSE(sel.ok()) << GetParam().selector;
  EXPECT_EQ(sel.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(sel.status().message(), HasSubstr(GetParam().problem));
  EXPECT_THAT(sel.status().message(), HasSubstr(std::string("\"") + GetParam().selector + "\""));
}

INSTANTIATE_TEST_SUITE_P(
    Table, SelectorErrorTest,
    ::testing::Values(
        BadCase{"a=b,,c", "at position 4: empty requirement"},
        BadCase{"a=b,", "at position 4: empty requirement"},
        BadCase{",a", "at position 0: empty requirement"},
        BadCase{"a b", "expected one of '=', '==', '!=', 'in', 'notin', ',' after key \"a\""},
        BadCase{"=b", "expected a label key"}, BadCase{"!", "expected a label key"},
        BadCase{"a=b c", "expected ',' between requirements"},
        BadCase{"-a=b", "key name must start and end with a letter or digit"},
        BadCase{"a=b-", "value must start and end with a letter or digit"},
        BadCase{"Bad_Prefix/a=b", "key prefix has invalid character 'B'"},
        BadCase{"/a", "key prefix must not be empty"},
        BadCase{"x/=b", "key name after '/' must not be empty"},
        BadCase{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa=b",
                "key name must be at most 63 characters"},
        BadCase{"a in b", "expected '(' after in/notin"},
        BadCase{"a in (b", "expected ',' or ')' in value set"},
        BadCase{"a in (b;c)", "expected ',' or ')' in value set"},
        BadCase{"a>1", "expected one of"}, BadCase{"a=b)", "expected ',' between requirements"}));

TEST(LabelSelectorTest, EmptySelectorMatchesObjectsWithoutLabels) {
  LabelSelector empty;
  EXPECT_TRUE(empty.Matches(nlohmann::json()));
  StatusOr<LabelSelector> not_owner = LabelSelector::Parse("!owner");
  ASSERT_TRUE(not_owner.ok());
  EXPECT_TRUE(not_owner->Matches(nlohmann::json()));
  StatusOr<LabelSelector> team = LabelSelector::Parse("team");
  ASSERT_TRUE(team.ok());
  EXPECT_FALSE(team->Matches(nlohmann::json()));
}

TEST(LabelSelectorTest, KeepsRequirementsInOrder) {
  StatusOr<LabelSelector> sel = LabelSelector::Parse("b=1,!a,c in (x,y)");
  ASSERT_TRUE(sel.ok());
  ASSERT_EQ(sel->requirements().size(), 3u);
  EXPECT_EQ(sel->requirements()[0].op, LabelSelector::Op::kEquals);
  EXPECT_EQ(sel->requirements()[1].op, LabelSelector::Op::kNotExists);
  EXPECT_EQ(sel->requirements()[2].values, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(sel->ToString(), "b=1,!a,c in (x,y)");
}

TEST(LabelSelectorTest, KeyAndValueRules) {
  EXPECT_EQ(LabelKeyProblem("app.kubernetes.io/name"), "");
  EXPECT_EQ(LabelValueProblem(""), "");
  EXPECT_EQ(LabelValueProblem("v1.2_x-y"), "");
  EXPECT_THAT(LabelValueProblem("a b"), HasSubstr("invalid character ' '"));
  EXPECT_THAT(LabelValueProblem(std::string(64, 'a')), HasSubstr("at most 63"));
}

}  // namespace
}  // namespace aicloud::store
