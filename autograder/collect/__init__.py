"""Submissions in: nbgrader's exchange (CourseCollect, the course's collect plugin) and Canvas/Moodle downloads
(zip_collect plugins).
"""
