"""The README's picture shows the stack as template.yaml deploys it: every function, stream mapping, queue and
schedule by its name, so a resource added to the template and not to the picture fails here."""

from __future__ import annotations

from deploy.template import ROOT, TEMPLATE, parse

DRAWN = {"AWS::Serverless::Function", "AWS::Lambda::EventSourceMapping", "AWS::SQS::Queue"}


def picture(readme: str) -> str:
    """The first code block under "How it fits together"."""
    section = readme.split("## How it fits together", 1)[1]
    return section.split("```", 2)[1]


def missing(readme: str, template_text: str) -> list[str]:
    resources = parse(template_text)["Resources"]
    names = [lid for lid, r in resources.items() if r["Type"] in DRAWN]
    names += [
        name
        for r in resources.values()
        if r["Type"] == "AWS::Serverless::Function"
        for name, event in r["Properties"].get("Events", {}).items()
        if event["Type"] in ("ScheduleV2", "Schedule")
    ]
    drawn = picture(readme)
    return sorted(name for name in names if name not in drawn)


def test_the_picture_names_every_function_mapping_queue_and_schedule():
    assert missing((ROOT / "README.md").read_text(), TEMPLATE.read_text()) == []


def test_the_check_sees_a_resource_left_out():
    readme = "## How it fits together\n```\nAFunction ──> AQueue\n```\nBQueue named outside the picture\n"
    template = (
        "Resources:\n  AFunction:\n    Type: AWS::Serverless::Function\n    Properties:\n      Events:\n"
        "        Tick: {Type: ScheduleV2, Properties: {ScheduleExpression: rate(5 minutes)}}\n"
        "  AQueue: {Type: AWS::SQS::Queue}\n  BQueue: {Type: AWS::SQS::Queue}\n  Table: {Type: AWS::DynamoDB::Table}\n"
    )
    assert missing(readme, template) == ["BQueue", "Tick"]
