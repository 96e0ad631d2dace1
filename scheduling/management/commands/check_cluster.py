from django.core.management.base import BaseCommand, CommandError

from scheduling.consistency import find_inconsistencies


class Command(BaseCommand):
    help = "Check that the database and the cluster backend agree (read-only); exit 1 if not."

    def handle(self, *args, **options) -> None:
        problems = find_inconsistencies()
        for problem in problems:
            self.stdout.write(problem)
        if problems:
            raise CommandError(f"{len(problems)} inconsistencies")
        self.stdout.write("database and cluster agree")
