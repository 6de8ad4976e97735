"""The explorer in real headless Chromium: the engineer's, steward's and viewer's paths."""

from __future__ import annotations

import itertools
import re
import time
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from playwright.sync_api import expect

from catalog.models import ChangeRecord, DatasetField
from tests import page_builders as pb

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def wait_until(page, expression: str, timeout: float = 15_000) -> None:
    """Wait until ``expression`` is true in the page. Not ``page.wait_for_function``: that
    evaluates its text in the page, which the Content-Security-Policy refuses (no eval)."""
    deadline = time.monotonic() + timeout / 1000
    while not page.evaluate(expression):
        assert time.monotonic() < deadline, f"still false after {timeout} ms: {expression}"
        page.wait_for_timeout(50)


def wait_for_graph(page, draws: int = 1) -> None:
    wait_until(
        page,
        f"document.querySelector('#cy') && Number(document.querySelector('#cy').dataset.draws || 0) >= {draws}",
    )


def click_node(page, node_id: str) -> None:
    """Click a drawn node where Cytoscape rendered it, as a single tap.

    Two clicks on the canvas within Cytoscape's multi-click window make a double tap,
    which opens the node's page; on a fast machine a test clicks that quickly.
    """
    window_ms = page.evaluate("window.lineageExplorer.cy.multiClickDebounceTime()")
    page.wait_for_timeout(window_ms + 50)
    box = page.locator("#cy").bounding_box()
    pos = page.evaluate(
        """(id) => { const n = window.lineageExplorer.cy.getElementById(id);
                     window.lineageExplorer.cy.center(n);
                     const p = n.renderedPosition(); return {x: p.x, y: p.y}; }""",
        node_id,
    )
    page.mouse.click(box["x"] + pos["x"], box["y"] + pos["y"])


def test_it_goes_from_search_to_dataset_to_graph_to_impact_to_export(page_as, viewer, shot):
    shop = pb.build_shop()
    page = page_as(viewer)
    page.goto("/")
    page.fill("#global-q", "customers")
    page.wait_for_selector("#global-suggest:not([hidden]) .suggest-list")
    shot(page, "1-suggest")
    page.press("#global-q", "Enter")
    page.wait_for_url(re.compile(r"/search/\?q=customers"))
    expect(page.locator("h2#r-datasets")).to_be_visible()
    shot(page, "2-search")

    page.get_by_role("link", name="lake/raw/customers", exact=True).first.click()
    page.wait_for_url(re.compile(r"/datasets/show\?"))
    page.wait_for_selector(".lineage-summary")
    page.wait_for_selector("h3:has-text('Written by')")
    assert page.locator("#fields").get_by_text("identifies customer").count() >= 1
    shot(page, "3-dataset")

    page.get_by_role("link", name="Explore lineage").click()
    page.wait_for_url(re.compile(r"/graph/\?node="))
    wait_for_graph(page)
    node_ids = page.evaluate("window.lineageExplorer.nodeIds()")
    assert f"dataset:{pb.LAKE}:lake/clean/customers" in node_ids
    shot(page, "4-graph")
    # The drawn graph as the server's CSV: one row per edge drawn.
    with page.expect_download() as download_info:
        page.get_by_role("button", name="CSV", exact=True).click()
    rows = Path(download_info.value.path()).read_text(encoding="utf-8").splitlines()
    assert rows[0] == "origin,origin_type,destination,destination_type"
    assert len(rows) - 1 == len(page.evaluate("window.lineageExplorer.edgeIds()"))
    with page.expect_download() as download_info:
        page.get_by_role("button", name="Mermaid", exact=True).click()
    assert Path(download_info.value.path()).read_text(encoding="utf-8").startswith("flowchart LR")

    clean = f"dataset:{pb.LAKE}:lake/clean/customers"
    click_node(page, clean)
    panel = page.locator("#node-panel")
    panel.get_by_role("heading", name="lake/clean/customers").wait_for()
    shot(page, "5-node-selected")
    panel.get_by_role("link", name="Impact").click()
    page.wait_for_url(re.compile(r"/impact/\?"))
    expect(page.get_by_text("1 job away")).to_be_visible()
    expect(page.get_by_role("link", name="lake/marts/revenue_by_country")).to_be_visible()
    shot(page, "6-impact")

    with page.expect_download() as download_info:
        page.get_by_role("link", name="Export CSV").click()
    csv_text = Path(download_info.value.path()).read_text(encoding="utf-8")
    assert csv_text.startswith("distance,node_id,namespace,name,owners")
    assert "lake/marts/revenue_by_country" in csv_text
    with page.expect_download() as download_info:
        page.get_by_role("link", name="Export Mermaid").click()
    assert Path(download_info.value.path()).read_text(encoding="utf-8").startswith("flowchart LR")
    assert shop.clean.pk


def test_it_redraws_the_edges_when_the_time_slider_moves(page_as, viewer, shot):
    shop = pb.build_shop()
    page = page_as(viewer)
    node = quote(f"dataset:{pb.LAKE}:{shop.c360.name}", safe="")
    page.goto(f"/graph/?node={node}&direction=upstream&depth=2")
    wait_for_graph(page)
    job = "job:spark://etl:build_customer_360"
    raw_edge = f"dataset:{pb.LAKE}:lake/raw/customers->{job}"
    clean_edge = f"dataset:{pb.LAKE}:lake/clean/customers->{job}"
    now_edges = page.evaluate("window.lineageExplorer.edgeIds()")
    assert clean_edge in now_edges and raw_edge not in now_edges
    shot(page, "now")

    slider = page.locator("#time-slider")
    instants = page.evaluate("Number(document.querySelector('#time-slider').max)")
    assert instants >= 2
    slider.focus()
    # Step back with the keyboard until the rewiring at 2025-03-01 is undone.
    for _ in range(instants):
        page.keyboard.press("ArrowLeft")
        label = page.locator("#time-label").inner_text()
        if label < "2025-03-01":
            break
    wait_for_graph(page, draws=2)
    wait_until(page, f"window.lineageExplorer.edgeIds().includes({raw_edge!r})", timeout=10_000)
    then_edges = page.evaluate("window.lineageExplorer.edgeIds()")
    assert raw_edge in then_edges and clean_edge not in then_edges
    assert "asOf=" in page.url
    shot(page, "past")

    page.check("#diff-toggle")
    wait_until(page, "location.search.includes('compare=')")
    # Shown the first change, the diff starts from just before it: everything is new.
    wait_until(
        page,
        "window.lineageExplorer.cy.edges().length > 0 && window.lineageExplorer.cy.edges()"
        ".every((e) => e.hasClass('diff-added'))",
        timeout=10_000,
    )
    page.locator("#time-now").click()
    compare = page.locator("#compare-slider")
    compare.focus()
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowLeft")  # back to the first change: now against then
    wait_until(
        page,
        "window.lineageExplorer.cy.edges('.diff-added').length > 0"
        " && window.lineageExplorer.cy.edges('.diff-removed').length > 0",
        timeout=10_000,
    )
    shot(page, "diff")


def test_it_lets_a_steward_flag_pii_and_see_it_in_history(page_as, steward, shot):
    shop = pb.build_shop()
    page = page_as(steward)
    page.goto(
        f"/datasets/show?namespace={quote(shop.orders.namespace.name, safe='')}"
        f"&name={quote(shop.orders.name, safe='')}"
    )
    row = page.locator("tr[data-field='customer_id']")
    row.get_by_role("link", name="Edit field customer_id").click()
    form = page.get_by_role("form", name="Edit field customer_id")
    form.get_by_label("Personal data").select_option("identifier")
    form.get_by_label("Identifies subject").select_option(label="customer")
    shot(page, "editing")
    form.get_by_role("button", name="Save").click()
    page.locator("tr[data-field='customer_id'] .badge-subject").wait_for()
    history = page.locator("#history")
    history.locator("tr", has_text="customer_id personal data").wait_for()
    assert "stella-steward" in history.inner_text()
    shot(page, "saved")
    field = DatasetField.objects.get(dataset=shop.orders, name="customer_id")
    assert field.pii_category == "identifier"
    assert ChangeRecord.objects.filter(dataset=shop.orders, attribute="subject_kind").exists()

    page.get_by_role("link", name="Edit dataset details").click()
    page.get_by_label("Description").fill("Every order placed in the shop")
    page.get_by_role("button", name="Save").click()
    page.get_by_text("Every order placed in the shop").first.wait_for()
    history.get_by_text("description", exact=True).wait_for()

    # The owner picker: a known team is offered, added to the list, and saved.
    page.get_by_role("link", name="Edit dataset details").click()
    owners = page.get_by_role("textbox", name="Owners", exact=True)
    before = owners.input_value()
    page.get_by_label("Add an owner").fill("data-eng")
    page.get_by_role("button", name="Add", exact=True).click()
    assert owners.input_value() == (f"{before}, data-eng" if before else "data-eng")
    page.get_by_role("button", name="Save").click()
    row = history.locator("tr", has_text="owners")
    row.first.wait_for()
    assert "data-eng" in row.first.inner_text() and "{" not in row.first.inner_text()
    # A misspelt owner is refused, naming it, until a new owner is asked for.
    page.get_by_role("link", name="Edit dataset details").click()
    page.get_by_label("Add an owner").fill("Priya Novak [DATA_OWNER")
    page.get_by_role("button", name="Save").click()
    page.get_by_text("is not an owner name").wait_for()
    shot(page, "owner-refused")


def test_it_gives_a_viewer_no_way_to_edit(page_as, viewer, shot, live_server):
    shop = pb.build_shop()
    page = page_as(viewer)
    url = (
        f"/datasets/show?namespace={quote(shop.orders.namespace.name, safe='')}"
        f"&name={quote(shop.orders.name, safe='')}"
    )
    page.goto(url)
    page.wait_for_selector("#fields")
    assert page.locator("a[data-edit]").count() == 0
    shot(page, "viewer")
    # Posting anyway is refused.
    status = page.evaluate(
        """async (target) => {
            const body = new FormData(); body.append('pii_category', 'email');
            const token = document.querySelector('input[name=csrfmiddlewaretoken]');
            const r = await fetch(target, {method: 'POST', body, headers: {'X-Fragment': '1',
                'X-CSRFToken': (document.cookie.match(/csrftoken=([^;]+)/) || [])[1] || ''}});
            return r.status; }""",
        url.replace("/datasets/show", "/datasets/field") + "&field=customer_id",
    )
    assert status == 403
    assert not ChangeRecord.objects.filter(dataset=shop.orders).exists()


def test_it_moves_between_nodes_with_the_keyboard(page_as, viewer, shot):
    shop = pb.build_shop()
    page = page_as(viewer)
    page.goto(f"/graph/?node={quote(f'dataset:{pb.LAKE}:{shop.raw.name}', safe='')}")
    wait_for_graph(page)
    page.locator("#cy").focus()
    page.keyboard.press("ArrowRight")
    assert page.locator("#node-panel h2").inner_text() == "lake/raw/customers"
    page.keyboard.press("ArrowRight")
    assert page.locator("#node-panel .kind").inner_text().lower() == "job"
    page.fill("#graph-find", "revenue")
    page.press("#graph-find", "Enter")
    assert "revenue" in page.locator("#node-panel h2").inner_text()
    shot(page, "keyboard")


def test_it_expands_and_collapses_a_node(page_as, viewer, shot):
    shop = pb.build_shop()
    page = page_as(viewer)
    start = quote(f"dataset:{pb.LAKE}:{shop.raw.name}", safe="")
    page.goto(f"/graph/?node={start}&direction=downstream&depth=1")
    wait_for_graph(page)
    before = page.evaluate("window.lineageExplorer.nodeIds()")
    clean = f"dataset:{pb.LAKE}:lake/clean/customers"
    assert clean in before
    assert f"dataset:{pb.LAKE}:lake/marts/revenue_by_country" not in before
    click_node(page, clean)
    page.get_by_role("button", name=re.compile(r"Expand downstream \(\+2\)")).click()
    wait_until(
        page,
        "window.lineageExplorer.nodeIds().includes("
        f"{f'dataset:{pb.LAKE}:lake/marts/revenue_by_country'!r})",
    )
    # Everything drawn is in view after the expand: nothing clipped at an edge.
    box = page.evaluate(
        "(() => { const cy = window.lineageExplorer.cy; const b = cy.elements().renderedBoundingBox();"
        " return [b.x1, b.y1, b.x2, b.y2, cy.width(), cy.height()]; })()"
    )
    assert box[0] >= 0 and box[1] >= 0 and box[2] <= box[4] and box[3] <= box[5], box
    shot(page, "expanded")
    click_node(page, clean)
    page.get_by_role("button", name="Collapse beyond this node").click()
    wait_until(page, f"window.lineageExplorer.nodeIds().length === {len(before)}")
    assert page.evaluate("window.lineageExplorer.nodeIds()") == before


def test_it_focuses_one_columns_path_at_column_level(page_as, viewer, shot):
    pb.build_shop()
    page = page_as(viewer)
    email = f"datasetField:{pb.SHOP}:shop.public.customers:email"
    page.goto(f"/graph/?node={quote(email, safe='')}&direction=downstream&depth=5")
    wait_for_graph(page)
    ids = page.evaluate("window.lineageExplorer.nodeIds()")
    masked = f"datasetField:{pb.LAKE}:lake/clean/customers:email_hash"
    assert masked in ids
    click_node(page, masked)
    page.get_by_role("button", name="Focus this column's path").click()
    wait_until(page, "location.search.includes('focus=')")
    dimmed = page.evaluate("window.lineageExplorer.cy.nodes('.dim').map((n) => n.id())")
    assert email not in dimmed and masked not in dimmed
    page.check("#hl-pii")
    shot(page, "column-path")


def test_it_shows_every_page_with_its_heading(page_as, steward, shot):
    shop = pb.build_shop()
    page = page_as(steward)
    job = shop.ingest
    tour = {
        "home": ("/", "Overview"),
        "datasets": ("/datasets/?pii=1", "Datasets"),
        "stewardship": ("/stewardship/", "Stewardship"),
        "job": (
            f"/jobs/show?namespace={quote(job.namespace.name, safe='')}&name={job.name}",
            job.name,
        ),
        "run": (f"/runs/{shop.runs['ingest-2'].run_uuid}", str(shop.runs["ingest-2"].run_uuid)),
        "root-cause": (
            f"/root-cause/?node={quote(f'dataset:{pb.LAKE}:{shop.revenue.name}', safe='')}",
            "Where",
        ),
    }
    for name, (url, heading) in tour.items():
        page.goto(url)
        expect(page.get_by_role("heading", level=1)).to_contain_text(heading)
        page.wait_for_load_state("networkidle")
        shot(page, name)


def test_the_api_documentation_and_admin_pages_draw_under_the_content_security_policy(
    page_as, viewer
):
    page = page_as(None)
    page.goto("/admin/login/")
    expect(page.get_by_role("button", name="Log in")).to_be_visible()
    page = page_as(viewer)
    page.goto("/api/docs/")
    expect(page.locator(".swagger-ui .opblock").first).to_be_visible()
    requested: list[str] = []
    refused: list[str] = []  # by the page's policy, before anything went out
    page.on("request", lambda request: requested.append(request.url))
    page.on(
        "requestfailed",
        lambda request: refused.append(request.url) if request.failure == "csp" else None,
    )
    page.goto("/api/redoc/")
    expect(page.get_by_role("heading", name="Lineage Explorer API").first).to_be_visible()
    page.wait_for_load_state("networkidle")
    elsewhere = [
        url
        for url in requested
        if urlsplit(url).hostname not in ("localhost", None) and url not in refused
    ]
    assert elsewhere == [], elsewhere


def test_a_steward_sees_where_a_propagated_flag_came_from_and_blocks_it(page_as, steward, shot):
    pb.build_shop()
    page = page_as(steward)
    clean = "lake/clean/customers"
    page.goto(f"/datasets/show?namespace={quote(pb.LAKE, safe='')}&name={quote(clean, safe='')}")
    row = page.locator("tr[data-field='email_hash']")
    expect(row.locator(".badge-pii")).to_contain_text("PII · Email address · masked")
    source = row.locator(".flag-origin a")
    expect(source).to_have_attribute("title", re.compile(r"shop.public.customers:email$"))
    shot(page, "propagated")
    row.get_by_role("button", name=re.compile("Not personal")).click()
    expect(page.locator("tr[data-field='email_hash']")).to_contain_text("not personal data here")
    expect(page.locator("tr[data-field='email_hash'] .badge-pii")).to_have_count(0)
    shot(page, "blocked")
    # The graph's personal-data overlay lights the copies the flag reached.
    node = f"datasetField:{pb.LAKE}:lake/raw/customers:email"
    page.goto(f"/graph/?node={quote(node, safe='')}&level=column&direction=downstream")
    wait_for_graph(page)
    lit = page.evaluate("window.lineageExplorer.cy.nodes('.pii').map(n => n.id())")
    assert any(node.endswith("lake/raw/customers:email") for node in lit)
    assert not any(node.endswith("email_hash") for node in lit)  # blocked above


def test_the_time_slider_has_a_date_axis_and_diff_starts_before_the_change(page_as, viewer, shot):
    shop = pb.build_shop()
    page = page_as(viewer)
    node = quote(f"dataset:{pb.LAKE}:{shop.c360.name}", safe="")
    page.goto(f"/graph/?node={node}&direction=upstream&depth=2")
    wait_for_graph(page)
    changes = int(page.locator("#time-slider").get_attribute("max"))
    assert changes >= 2
    # A tick for each change, dates under some of them, "now" at the end, none overlapping.
    assert page.locator("#time-marks option").count() == changes
    ticks = page.locator("#time-axis .time-tick")
    texts = ticks.all_inner_texts()
    assert texts[-1] == "now" and re.fullmatch(
        r"\d{1,2} [A-Z][a-z]{2}( \d\d:\d\d(:\d\d)?)?", texts[0]
    )
    assert len(set(texts)) == len(texts), texts  # no two ticks read the same
    boxes = [ticks.nth(i).bounding_box() for i in range(ticks.count())]
    assert all(a["x"] + a["width"] <= b["x"] for a, b in itertools.pairwise(boxes))
    size = page.evaluate(
        "parseFloat(getComputedStyle(document.querySelector('#time-axis .time-tick')).fontSize)"
    )
    assert size >= 11
    shot(page, "axis")
    # First toggle at "now": compared with the state just before the last change.
    page.check("#diff-toggle")
    wait_until(page, "location.search.includes('compare=')")
    wait_until(
        page, "document.querySelector('#graph-status').textContent.includes('compared with')"
    )
    status = page.locator("#graph-status").inner_text()
    assert "0 edges added, 0 removed" not in status
    assert page.evaluate("window.lineageExplorer.cy.edges('.diff-added, .diff-removed').length") > 0
    shot(page, "diff")


def fan_out(jobs: int = 12) -> str:
    """A dataset read by ``jobs`` jobs, each writing two datasets: 1 + 3 * jobs nodes."""
    source = pb.make_dataset(pb.LAKE, "lake/raw/events", ("id",), platform="s3")
    for i in range(jobs):
        # The first names are long: the cards cut them to their box.
        long = "insert_overwrite.reports.top_customers_by_value.cd6a2f47b3d1_" if i == 0 else ""
        job = pb.make_job(pb.SPARK, f"{long}derive_{i:02d}")
        outputs = [pb.make_dataset(pb.LAKE, f"lake/marts/{long}derived_{i:02d}_{k}") for k in "ab"]
        pb.connect(job, [source], outputs)
    return f"dataset:{pb.LAKE}:lake/raw/events"


@pytest.mark.parametrize("width", [1440, 800])
def test_the_first_view_draws_readable_cards(page_as, viewer, shot, width):
    root = fan_out(12)  # 37 nodes
    page = page_as(viewer)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"/graph/?node={quote(root, safe='')}&direction=downstream&depth=2")
    wait_for_graph(page)
    assert int(page.locator("#cy").get_attribute("data-nodes")) == 37
    sizes = page.evaluate(
        """() => { const cy = window.lineageExplorer.cy;
                   return cy.nodes().map((n) => parseFloat(n.style('font-size')) * cy.zoom()); }"""
    )
    assert min(sizes) >= 11, sizes
    assert page.evaluate("window.lineageExplorer.cy.nodes('.nolabel').length") == 0
    # Every label fits its box, each line measured in the font it is drawn in.
    spilled = page.evaluate(
        """() => { const cy = window.lineageExplorer.cy;
                   const ruler = document.createElement('canvas').getContext('2d');
                   return cy.nodes().filter((n) => {
                     ruler.font = [n.style('font-weight'), n.style('font-size'),
                                   n.style('font-family')].join(' ');
                     return n.data('display').split('\\n').some(
                       (line) => ruler.measureText(line).width > n.width() - 8);
                   }).map((n) => n.data('display')); }"""
    )
    assert spilled == []
    cut = page.evaluate(
        "window.lineageExplorer.cy.nodes('.job').map((n) => n.data('display'))"
        ".filter((d) => d.includes('…'))"
    )
    assert len(cut) == 1 and cut[0].endswith("…") and "cd6a2f47b3d1" in cut[0], cut
    # The card: last name segment, then the segment before it and where it lives.
    label = page.evaluate(f"window.lineageExplorer.cy.getElementById({root!r}).data('display')")
    assert label.startswith("events") and "raw · s3" in label
    # The start node is in view.
    pos = page.evaluate(
        f"(() => {{ const p = window.lineageExplorer.cy.getElementById({root!r}).renderedPosition();"
        " const cy = window.lineageExplorer.cy; return [p.x, p.y, cy.width(), cy.height()]; })()"
    )
    assert 0 < pos[0] < pos[2] and 0 < pos[1] < pos[3]
    shot(page, f"first-view-{width}")
    # Its full name on hover.
    box = page.locator("#cy").bounding_box()
    page.mouse.move(box["x"] + pos[0], box["y"] + pos[1])
    assert page.locator("#cy").get_attribute("title") == f"{pb.LAKE}:lake/raw/events"
    # Selecting a node brings its panel into the window, also on a narrow screen.
    click_node(page, root)
    panel = page.locator("#node-panel")
    panel.get_by_role("heading", name="lake/raw/events").wait_for()
    top = panel.bounding_box()["y"]
    assert 0 <= top < 900
    shot(page, f"panel-{width}")


def ds_page(ds, **extra: str) -> str:
    params = {"namespace": ds.namespace.name, "name": ds.name, **extra}
    return "/datasets/show?" + "&".join(f"{k}={quote(v, safe='')}" for k, v in params.items())


def test_an_engineer_taints_a_dataset_and_clears_it_from_its_page(page_as, engineer, shot):
    shop = pb.build_shop()
    page = page_as(engineer)
    page.goto(ds_page(shop.raw))
    section = page.locator("#taints")
    section.get_by_text("No active taint on this dataset").wait_for()
    section.get_by_label("What is wrong with its data").fill("Duplicated rows on the 3rd")
    section.get_by_role("button", name="Mark as tainted").click()
    page.wait_for_url(re.compile(r"#taints-h$"))
    section.get_by_text("Duplicated rows on the 3rd").wait_for()
    order = section.locator("ol.rerun-order li").all_inner_texts()
    assert order[0].startswith("clean_customers") and len(order) == 3
    assert "lake/marts/revenue_by_country" in section.inner_text()
    shot(page, "tainted")
    section.get_by_role("button", name="Clear this taint").click()
    page.wait_for_url(re.compile(r"#taints-h$"))
    section.get_by_text("No active taint on this dataset").wait_for()


def test_the_dataset_page_travels_in_time_and_filters_its_history(page_as, steward, shot):
    shop = pb.build_shop()
    ChangeRecord.objects.create(
        at=pb.T2, source="lineage", dataset=shop.customers, attribute="lifecycle", new="OVERWRITE"
    )
    page = page_as(steward)
    page.goto(ds_page(shop.customers))
    history = page.locator("#history")
    # People's edits by default; lineage's records one click away.
    assert "OVERWRITE" not in history.inner_text()
    page.get_by_role("link", name="Lineage events").click()
    page.locator("#history", has_text="OVERWRITE").wait_for()
    expect(page.get_by_role("link", name="Lineage events")).to_have_attribute(
        "aria-current", "true"
    )
    # As of an instant before the email flag: one personal-data field, no later runs.
    page.goto(ds_page(shop.customers, asOf="2025-01-15T00:00:00Z"))
    expect(page.locator(".head-badges")).to_have_text(re.compile(r"1 personal-data field\b"))
    page.locator(".runs").first.wait_for()
    assert "failed" not in page.locator("#runs-h ~ div").inner_text()
    shot(page, "as-of")
    # Before it existed, and a date that is not one.
    shop.customers.first_seen = pb.T1
    shop.customers.save(update_fields=["first_seen"])
    page.goto(ds_page(shop.customers, asOf="2025-01-15T00:00:00Z"))
    expect(page.locator("#not-yet")).to_contain_text("did not exist yet on 2025-01-15")
    assert page.locator("#fields").count() == 0
    response = page.goto(ds_page(shop.customers, asOf="yesterday"))
    assert response.status == 400
    expect(page.get_by_role("alert")).to_contain_text("asOf is not an ISO-8601 instant")


def test_a_retired_job_is_drawn_only_as_of_when_it_was_live(page_as, viewer, shot):

    shop = pb.build_shop()
    pb.drop(shop.revenue, pb.T3)
    page = page_as(viewer)
    clean = quote(f"dataset:{pb.LAKE}:{shop.clean.name}", safe="")
    report = "job:spark://etl:revenue_report"
    page.goto(f"/graph/?node={clean}&direction=downstream&depth=2")
    wait_for_graph(page)
    assert report not in page.evaluate("window.lineageExplorer.nodeIds()")
    page.goto(f"/graph/?node={clean}&direction=downstream&depth=2&asOf=2025-03-15T00:00:00Z")
    wait_for_graph(page)
    assert report in page.evaluate("window.lineageExplorer.nodeIds()")
    shot(page, "as-of-when-live")
    # The dropped report's page: not a source, and the lineage box counts what it lists.
    page.goto(ds_page(shop.revenue))
    box = page.locator(".lineage-summary")
    expect(box).to_contain_text("Dropped on 2025-04-01 00:00")
    assert "a source" not in box.inner_text()
    page.goto(ds_page(shop.clean))
    box = page.locator(".lineage-summary")
    expect(box.get_by_role("heading", name=re.compile("One job downstream"))).to_contain_text("(1)")
    assert box.locator("h3:has-text('One job downstream') + ul li").count() == 1


def test_the_sql_log_page_lists_a_log_the_command_loaded(page_as, engineer, shot):
    from tests.test_sql_logs import ingest

    ingest("warehouse.csv")
    page = page_as(engineer)
    page.goto("/ingestion/sql-logs/")
    row = page.get_by_role("row", name=re.compile("warehouse.csv"))
    expect(row).to_contain_text("by manage.py ingest_sql_log")
    expect(page.get_by_text("No SQL logs yet")).to_have_count(0)


def test_the_compliance_evidence_names_nodes_by_short_linked_names(page_as, compliance, shot):
    import time_machine

    from tests.privacy_builders import NOW, build_shop

    with time_machine.travel(NOW, tick=False):
        build_shop()
    page = page_as(compliance)
    page.goto("/privacy/")
    page.locator("select[name=subjectKind]").select_option("customer")
    page.locator("input[name='value-0']").fill("8675309-zq")
    page.get_by_role("button", name="Search").click()
    page.locator("article.hit").first.wait_for()
    for summary in page.locator("article.hit details summary").all():
        summary.click()  # open every hit's evidence
    link = page.locator("ol.evidence a[title^='job:']").first
    expect(link).to_be_visible()
    title = link.get_attribute("title")
    assert link.inner_text() == title.rsplit(":", 1)[1]  # the job's own name, its id on hover
    assert (
        not page.locator("ol.evidence")
        .first.get_by_text(re.compile(r"^(datasetField|job):"))
        .count()
    )
    shot(page, "evidence")
    link.click()
    page.wait_for_url(re.compile(r"/jobs/show\\?"))
